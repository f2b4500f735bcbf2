// CoordinatorLink: the worker's side of registration, heartbeats and deregistration
// (docs/PROTOCOL.md, "Worker start-up").
//
//   Register()        RegisterWorker with the stored id (none on the first start), retrying with
//                     back-off while the coordinator is UNAVAILABLE (or the call times out) until it
//                     answers or Stop() is called. NOT_FOUND for a stored id (the coordinator lost
//                     its state) → registers again without an id. The id the coordinator returns
//                     is stored in the state directory, given to the WorkerService and put in the
//                     log lines ("worker w-3f2a").
//   StartHeartbeats() a thread sending Heartbeat every heartbeat_interval_ms (as the coordinator
//                     says, refreshed by every answer) with the service's state, current work, the
//                     highest measured peak since the last heartbeat that arrived, and the cached
//                     parameter versions. Answers:
//                       OK                   finished_job_ids are dropped from the ParameterCache;
//                       NOT_FOUND            registers again, keeping the id (Register());
//                       FAILED_PRECONDITION  this incarnation was superseded: `on_superseded` is
//                                            called once and heartbeats stop; the process must
//                                            stop serving;
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
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/slimfit.grpc.pb.h"
#include "worker/parameter_cache.h"
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
    // The worker token.
    std::string token;
    // Every field but worker_id: profile, budget, device, advertise address, threads, version.
    v1::RegisterWorkerRequest registration;
    // Where the worker id is kept. Not owned; required.
    const StateDir* state = nullptr;
    // Reports the worker's state and learns its id. Not owned; required.
    WorkerService* service = nullptr;
    // Finished jobs are dropped from it. Not owned; required.
    ParameterCache* cache = nullptr;
    // Called once, from the heartbeat thread, when the coordinator says this incarnation is
    // superseded. Must not call Stop() (it joins that thread): notify the main thread instead.
    std::function<void(const absl::Status&)> on_superseded;
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
  void HeartbeatLoop();
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
  std::thread heartbeat_thread_;  // started once by StartHeartbeats, joined by Stop
  absl::Mutex thread_mu_;         // serialises starting and joining the thread
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_COORDINATOR_LINK_H_
