// Who this worker is to its coordinator, and whom it accepts: the join token it registers with the
// first time, the credential the coordinator issues then (kept in the state directory), and the
// coordinator token of the current incarnation (proto/slimfit.proto, "Authentication").
//
//   BearerForCoordinator()  what the worker presents to the coordinator: its credential once it has
//                           one, the join token before;
//   AcceptsCoordinator(t)   ComputeGradient callers: the current coordinator token only;
//   AcceptsOperator(t)      GetProfile and Plan callers: the coordinator token or the join token.
//
// Thread safety: thread-safe; CoordinatorLink updates it while gRPC threads read it.
#ifndef SLIMFIT_WORKER_WORKER_IDENTITY_H_
#define SLIMFIT_WORKER_WORKER_IDENTITY_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace slimfit::worker {

class WorkerIdentity {
 public:
  // Either may be empty: a worker needs the join token only until it holds a credential.
  WorkerIdentity(std::string join_token, std::string credential)
      : join_token_(std::move(join_token)), credential_(std::move(credential)) {}
  WorkerIdentity(const WorkerIdentity&) = delete;
  WorkerIdentity& operator=(const WorkerIdentity&) = delete;

  std::string BearerForCoordinator() const;
  bool has_credential() const;
  bool has_join_token() const { return !join_token_.empty(); }
  const std::string& join_token() const { return join_token_; }

  void SetCredential(std::string credential);
  // Forgets the credential: the coordinator no longer knows this worker (it lost its state), so the
  // next registration uses the join token.
  void ClearCredential();
  // The token the coordinator presents for the incarnation registered last.
  void SetCoordinatorToken(std::string token);

  bool AcceptsCoordinator(absl::string_view token) const;
  bool AcceptsOperator(absl::string_view token) const;

 private:
  const std::string join_token_;
  mutable absl::Mutex mutex_;
  std::string credential_ ABSL_GUARDED_BY(mutex_);
  std::string coordinator_token_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_WORKER_IDENTITY_H_
