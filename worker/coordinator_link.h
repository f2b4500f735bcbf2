// CoordinatorLink: the worker's side of registration, heartbeats and deregistration
// (docs/PROTOCOL.md, "Worker start-up").
//
//   Register()        RegisterWorker — with the stored id and credential, or on the first start
//                     with the join token and no id — retrying with back-off while the coordinator
//                     is UNAVAILABLE (or the call times out) until it answers or Stop() is called.
//                     NOT_FOUND for the stored identity (the coordinator lost its state) → joins
//                     again as a new worker with the join token (none: an error). The id and the
//                     credential the coordinator returns are stored in the state directory and the
//                     WorkerIdentity, the coordinator token of the incarnation in the
//                     WorkerIdentity; the id goes to the WorkerService and the log lines
//                     ("worker w-3f2a"). PERMISSION_DENIED (revoked) is final.
//   StartHeartbeats() a thread sending Heartbeat every heartbeat_interval_ms (as the coordinator
//                     says, refreshed by every answer) with the service's state, current work, the
//                     highest measured peak since the last heartbeat that arrived, and the cached
//                     parameter versions. Answers:
//                       OK                   finished_job_ids are dropped from the ParameterCache;
//                       NOT_FOUND, UNAUTHENTICATED  registers again (Register()): keeping the id,
//                                            or joining anew if the coordinator forgot it;
//                       FAILED_PRECONDITION  this incarnation was superseded, or
//                       PERMISSION_DENIED    this worker was revoked: `on_stop` is called once and
//                                            heartbeats stop; the process must stop serving;
//                       UNAVAILABLE, DEADLINE_EXCEEDED  retried with back-off (a restarted
//                                            coordinator then answers OK, or NOT_FOUND above);
//                       anything else        logged, retried at the interval.
//   HeartbeatNow()    wakes the heartbeat thread (e.g. to report DRAINING at once).
//   Deregister()      DeregisterWorker with a reason, retried while UNAVAILABLE within a timeout.
//   Stop()            ends the heartbeat thread and a Register() in progress. Idempotent.
//
// Example:
//   CoordinatorLink link(options);
//   if (absl::Status s = link.Register(); !s.ok()) return s;
//   link.StartHeartbeats();
//   ...                                   // serve until SIGTERM
//   link.Stop();
//   link.Deregister("SIGTERM", absl::Seconds(5));
//
// Thread safety: safe for concurrent use; Register() and Deregister() block the caller.
#ifndef SLIMFIT_WORKER_COORDINATOR_LINK_H_
#define SLIMFIT_WORKER_COORDINATOR_LINK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/thread.h"
#include "proto/slimfit.grpc.pb.h"
#include "worker/parameter_cache.h"
#include "worker/worker_identity.h"
#include "worker/worker_service.h"
#include "worker/worker_state.h"

namespace slimfit::worker {

class CoordinatorLink {
 public:
  struct Options {
    // The coordinator's stub; required.
    std::shared_ptr<v1::Coordinator::StubInterface> coordinator;
    // For log lines: where the coordinator is.
    std::string coordinator_address;
    // The join token, the credential and the coordinator token. Not owned; required.
    WorkerIdentity* identity = nullptr;
    // Every field but worker_id: profile, budget, device, advertise address, threads, version.
    v1::RegisterWorkerRequest registration;
    // Where the worker id is kept. Not owned; required.
    const StateDir* state = nullptr;
    // Reports the worker's state and learns its id. Not owned; required.
    WorkerService* service = nullptr;
    // Finished jobs are dropped from it. Not owned; required.
    ParameterCache* cache = nullptr;
    // Called once, from the heartbeat thread, when the coordinator says this incarnation is
    // superseded (FAILED_PRECONDITION) or the worker revoked (PERMISSION_DENIED). Must not call
    // Stop() (it joins that thread): notify the main thread instead.
    std::function<void(const absl::Status&)> on_stop;
    // Appended to the log line of an unreachable coordinator (e.g. what to check when TLS is on).
    std::string unavailable_hint;
    // Deadline of each unary call.
    absl::Duration rpc_timeout = absl::Seconds(10);
    // Back-off between retries: doubles from initial to max.
    absl::Duration initial_backoff = absl::Milliseconds(100);
    absl::Duration max_backoff = absl::Seconds(5);
  };

  explicit CoordinatorLink(Options options);
  CoordinatorLink(const CoordinatorLink&) = delete;
  CoordinatorLink& operator=(const CoordinatorLink&) = delete;
  ~CoordinatorLink();  // Stop()

  // See the file comment. Errors: CANCELLED after Stop(); the coordinator's answer for errors
  // not retried (INVALID_ARGUMENT, UNAUTHENTICATED, ...), prefixed with what was attempted; the
  // state directory's errors reading or storing the id.
  [[nodiscard]] absl::Status Register();

  // REQUIRES: Register() succeeded. Idempotent; does nothing after Stop().
  void StartHeartbeats();
  void HeartbeatNow();

  // REQUIRES: Register() succeeded. The coordinator's error (NOT_FOUND, FAILED_PRECONDITION, …),
  // or UNAVAILABLE / DEADLINE_EXCEEDED when `timeout` ran out while retrying.
  [[nodiscard]] absl::Status Deregister(const std::string& reason, absl::Duration timeout);

  void Stop();

  std::string worker_id() const;
  uint64_t incarnation() const;

 private:
  absl::Status HeartbeatLoop();
  // One Heartbeat call; its status.
  absl::Status SendHeartbeat(int64_t* pending_peak);
  // Waits up to `duration`, or until Stop() (false then) or HeartbeatNow().
  bool Sleep(absl::Duration duration, bool wake_on_request);

  // Constant after construction.
  const Options options_;

  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex thread_mu_;  // serialises starting and joining the thread
  base::Thread heartbeat_thread_
      ABSL_GUARDED_BY(thread_mu_);  // started once by StartHeartbeats, joined by Stop
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_COORDINATOR_LINK_H_
