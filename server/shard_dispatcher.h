// Runs one round's (or one evaluation's) shards on a job's workers: cut the sequences in proportion
// to the workers' predicted speed (shard_split.h), call every worker's ComputeGradient in waves —
// one thread per worker, one shard at a time per worker (WorkerLeases, across jobs) — and sum what
// comes back once per shard (GradientAggregator). A failed shard goes back, attempt + 1, to a worker
// that did not just fail (a ShardReassigned event); UNAVAILABLE (busy, draining, unreachable, lost)
// does not count against options.max_attempts, other failures do. While a wave runs, calls to
// workers that stop being live (LOST, LEFT, re-registered) are cancelled at once, so a frozen
// worker costs the registry's lost_after, not the shard's deadline.
//
// Thread safety: Run is called by the job runner's thread; CancelAll from any thread. The pointers
// in Deps must outlive the dispatcher.
#ifndef SLIMFIT_SERVER_SHARD_DISPATCHER_H_
#define SLIMFIT_SERVER_SHARD_DISPATCHER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "performer/plan.h"
#include "proto/slimfit.pb.h"
#include "server/event_signal.h"
#include "server/gradient_aggregator.h"
#include "server/job_data.h"
#include "server/job_record.h"
#include "server/runner_options.h"
#include "server/worker_leases.h"
#include "server/worker_planner.h"
#include "server/worker_registry.h"

namespace slimfit::server {

// What one round's shards added up to.
struct RoundOutput {
  std::vector<at::Tensor> gradient;  // float64, model order; empty for an evaluation
  double loss_sum = 0;
  int64_t tokens = 0;
  int workers = 0;  // workers whose results counted
  int shards = 0;
  int reassigned = 0;  // shards that needed more than one attempt
};

class ShardDispatcher {
 public:
  struct Deps {
    JobRecord* record = nullptr;
    WorkerRegistry* registry = nullptr;
    WorkerLeases* leases = nullptr;
    EventSignal* signal = nullptr;
    WorkerPlanner* planner = nullptr;
    const JobData* data = nullptr;
    RunnerOptions options;
    // The model's parameter names and shapes (gradients are checked against them), its dtype on
    // the wire, the token encoding and the FAVOR+ seed.
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> shapes;
    performer::DType dtype = performer::DType::kFloat32;
    v1::TokenEncoding encoding = v1::TOKEN_ENCODING_UINT8;
    uint64_t feature_seed = 0;
    const std::atomic<bool>* stopping = nullptr;  // the runner's stop or cancel flag
  };

  explicit ShardDispatcher(Deps deps) : deps_(std::move(deps)) {}
  ShardDispatcher(const ShardDispatcher&) = delete;
  ShardDispatcher& operator=(const ShardDispatcher&) = delete;

  // Runs `sequences` against parameter `version`: every shard's gradient is ∇(its loss sum / the
  // predicted tokens of all `sequences`), so the sum is the gradient of their mean loss.
  // CANCELLED when the runner stops; UNAVAILABLE naming the shard when one fails max_attempts
  // times; the planner's errors.
  absl::StatusOr<RoundOutput> Run(int64_t round, uint64_t version, const std::vector<SequenceRef>& sequences,
                                  bool evaluate_only);

  // Cancels every call in flight. REQUIRES: *deps.stopping was set first, so that a call starting
  // after this is cancelled as it registers.
  void CancelAll();

 private:
  struct Shard {
    int64_t id = 0;
    std::vector<SequenceRef> sequences;
    int64_t expected_tokens = 0;
    int attempt = 1;    // sent to the worker: 1 + reassignments
    int failures = 0;   // attempts that count against RunnerOptions::max_attempts
    size_t worker = 0;  // index into the wave's plans
    std::string last_error;
  };

  std::vector<Shard> CutRound(const std::vector<SequenceRef>& sequences, const std::vector<WorkerPlan>& plans) const;
  absl::Status CallShard(const WorkerPlan& plan, const Shard& shard, int64_t round, uint64_t version,
                         int64_t normalizer, bool evaluate_only, GradientAggregator* aggregator,
                         int64_t* measured_peak);
  // Cancels the calls in flight to workers that can no longer answer them (LOST, LEFT, or
  // re-registered as a new incarnation); DRAINING workers may finish theirs.
  void CancelCallsToGoneWorkers();
  bool stopping() const { return deps_.stopping->load(); }

  const Deps deps_;

  absl::Mutex mutex_;
  // Calls in flight and the worker each goes to (id, incarnation).
  std::map<grpc::ClientContext*, std::pair<std::string, uint64_t>> in_flight_ ABSL_GUARDED_BY(mutex_);
  // Calls cancelled because their worker went away: reported as UNAVAILABLE, not as failures.
  std::set<grpc::ClientContext*> cancelled_gone_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_SHARD_DISPATCHER_H_
