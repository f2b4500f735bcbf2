// WorkerService: the slimfit.v1.Worker gRPC service of `slimfit-worker` (sync API): exact
// gradients of shards under a Plan within the worker's memory budget, its profile, and the
// planner run with its profile (proto/slimfit.proto, service Worker; docs/PROTOCOL.md, "One round").
//
// ComputeGradient, in order:
//   1. the coordinator token of the current incarnation (WorkerIdentity::AcceptsCoordinator:
//      UNAUTHENTICATED otherwise, constant-time compare);
//   2. the request (ValidateShardRequest: INVALID_ARGUMENT naming the field);
//   3. one shard at a time: UNAVAILABLE "busy with job X round R shard S" while another runs,
//      UNAVAILABLE when draining;
//   4. the parameters from the ParameterCache (its ABORTED, NOT_FOUND, UNAVAILABLE pass through);
//   5. the tokens against the model's vocabulary (INVALID_ARGUMENT "tokens: ...");
//   6. the budget: the plan re-predicted with the worker's own profile for the shard's workload
//      (L, most documents in one sequence, and the running gradient sum when the shard has
//      several sequences: planner::Workload::gradient_sum), must fit floor(budget · 0.9) — RESOURCE_EXHAUSTED
//      with ErrorDetail {required_bytes, budget_bytes, usable_bytes} otherwise, before anything runs;
//   7. the engine on each sequence (slice clamped to a shorter last sequence) with the request's
//      normaliser and feature seed, summing gradients in place; between sequences the call
//      stops with CANCELLED when the caller cancelled or the shard was abandoned
//      (CancelCurrentShard). Engine errors: RESOURCE_EXHAUSTED with the measured peak and the
//      budget, INTERNAL with the plan;
//   8. every gradient tensor in model order as TensorChunks in the plan's dtype, then the
//      GradientSummary (evaluate_only: the summary alone; the engine still runs the backward).
// GradientSummary.predicted_peak_bytes is the worker's own prediction as checked in step 6
// (running sum included), the figure measured_peak_bytes compares with.
//
// Heartbeats read the service's state (HeartbeatState); SIGTERM handling calls StartDraining(),
// WaitUntilIdle() and, when the wait runs out, CancelCurrentShard().
//
// Thread safety: safe for concurrent use; gRPC calls the RPC methods from its thread pool.
#ifndef SLIMFIT_WORKER_WORKER_SERVICE_H_
#define SLIMFIT_WORKER_WORKER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/dedicated_thread.h"
#include "performer/plan.h"
#include "planner/device_profile.h"
#include "proto/slimfit.grpc.pb.h"
#include "worker/local_data_reader.h"
#include "worker/local_steps.h"
#include "worker/parameter_cache.h"
#include "worker/shard_request.h"
#include "worker/worker_identity.h"

namespace slimfit::worker {

// The worker's software version, sent on registration and in GetProfile.
inline constexpr char kWorkerVersion[] = "0.4.0";

class WorkerService final : public v1::Worker::Service {
 public:
  struct Options {
    // Whom the service accepts (ComputeGradient: the coordinator; GetProfile, Plan: the coordinator
    // or an operator with the join token). Not owned; must outlive the service. Required.
    const WorkerIdentity* identity = nullptr;
    // The calibrated profile the budget check and the Plan RPC use, and when it was calibrated.
    planner::DeviceProfile profile;
    absl::Time calibrated_at = absl::InfinitePast();
    // --memory_budget; > 0.
    int64_t memory_budget_bytes = 0;
    std::string device = "cpu";  // --device, as registered
    int threads = 1;             // --threads
    // --cuda_graphs: on a GPU, slices that repeat a shape run as replayed CUDA graphs
    // (performer::SliceReplay::kAuto); false runs every slice op by op.
    bool cuda_graphs = true;
    // Where parameters come from. Not owned; must outlive the service. Required.
    ParameterCache* cache = nullptr;
    // Where local-steps jobs keep their inner optimizer state (LocalStepsTrainer); empty: memory
    // only (lost on restart).
    std::string local_steps_dir;
    // The datasets the worker holds (--data), for DescribeLocalData and local_data shards; null:
    // none. Not owned; must outlive the service.
    LocalDataReader* local_data = nullptr;
  };

  // What a heartbeat reports.
  struct HeartbeatState {
    v1::WorkerState state = v1::WORKER_STATE_IDLE;  // IDLE, BUSY or DRAINING
    std::optional<v1::CurrentWork> current_work;    // set while a shard runs
    int64_t measured_peak_bytes = 0;                // highest since the previous TakeHeartbeatState
  };

  explicit WorkerService(Options options);
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  grpc::Status ComputeGradient(grpc::ServerContext* context, const v1::ComputeGradientRequest* request,
                               grpc::ServerWriter<v1::ComputeGradientResponse>* writer) override;
  grpc::Status GetProfile(grpc::ServerContext* context, const v1::GetProfileRequest* request,
                          v1::GetProfileResponse* response) override;
  grpc::Status Plan(grpc::ServerContext* context, const v1::PlanRequest* request,
                    v1::MemoryPlan* response) override;
  grpc::Status DescribeLocalData(grpc::ServerContext* context, const v1::DescribeLocalDataRequest* request,
                                 v1::LocalDataLayout* response) override;

  // The id the coordinator gave this worker (set after each registration); "" before.
  void SetWorkerId(const std::string& worker_id);
  std::string worker_id() const;

  // The current state; resets the highest measured peak, so each heartbeat reports the peak
  // since the previous one.
  HeartbeatState TakeHeartbeatState();

  // Takes no new shard from now on (UNAVAILABLE); a running shard continues. Idempotent.
  void StartDraining();
  // Blocks until no shard runs or `timeout` passes; true when idle.
  bool WaitUntilIdle(absl::Duration timeout);
  // Abandons the running shard (if any) at its next sequence boundary: its call ends CANCELLED.
  void CancelCurrentShard();

  // The job finished: drops its local-steps inner optimizer state, in memory and on disk.
  void ForgetJob(const std::string& job_id) { local_steps_.Forget(job_id); }
  // Jobs whose local-steps inner optimizer state the worker holds (LocalStepsTrainer::Jobs).
  std::vector<std::string> LocalStepsJobs() const { return local_steps_.Jobs(); }

 private:
  // The shard's work after the busy check; the status goes to the caller as is.
  absl::Status RunShard(grpc::ServerContext* context, const v1::ComputeGradientRequest& request,
                        const performer::Plan& plan, absl::Time started,
                        grpc::ServerWriter<v1::ComputeGradientResponse>* writer);
  // The request's sequences: its tokens, or those of a dataset the worker holds (local_data).
  absl::StatusOr<Shard> CutRequestShard(const v1::ComputeGradientRequest& request, int64_t vocab);
  // `coordinator_only`: ComputeGradient; otherwise the join token is accepted too.
  grpc::Status Authenticate(const grpc::ServerContext& context, bool coordinator_only) const;
  // "w-3f2a", or "(unregistered)" before the first registration.
  std::string WorkerName() const;
  std::string WorkerNameLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordPeak(int64_t peak_bytes);

  // Constant after construction.
  const Options options_;

  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::CurrentWork> current_ ABSL_GUARDED_BY(mu_);  // set while a shard runs
  int64_t peak_since_heartbeat_ ABSL_GUARDED_BY(mu_) = 0;
  // Set by CancelCurrentShard, cleared when a shard starts; read between sequences.
  std::atomic<bool> abandon_{false};
  LocalStepsTrainer local_steps_;
  // Every shard runs here, whichever gRPC thread took its call: the allocator keeps freed memory
  // per thread (one arena each), so shards on many threads kept many high-water marks resident.
  // Last: destroyed (joined) first.
  base::DedicatedThread shard_thread_;
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_WORKER_SERVICE_H_
