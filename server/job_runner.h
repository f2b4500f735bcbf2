// One job's life on the coordinator, on its own thread: wait for eligible workers (QUEUED), then
// for every round — plan per worker (the planner with the worker's profile and budget), split the
// round's sequences across workers in proportion to their predicted speed, send shards with
// deadlines, reassign failed or timed-out shards, aggregate (GradientAggregator), step the
// optimizer (Trainer), publish the new parameter version, evaluate and checkpoint on schedule —
// until SUCCEEDED, FAILED or CANCELLED. Every state change, round, evaluation, checkpoint, plan
// change and reassignment is stored (StateStore) and published as a JobEvent.
//
// Durability: a runner starts either fresh (writes the round-0 checkpoint first) or from the job's
// latest checkpoint (parameters and optimizer state), so a coordinator restart resumes the job at
// its last checkpoint. Parameter versions keep increasing across restarts.
//
// Thread safety: public methods are thread-safe; the runner's thread owns the trainer.
#ifndef SLIMFIT_SERVER_JOB_RUNNER_H_
#define SLIMFIT_SERVER_JOB_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "planner/plan_search.h"
#include "proto/slimfit.pb.h"
#include "server/gradient_aggregator.h"
#include "server/job_data.h"
#include "server/state_store.h"
#include "server/trainer.h"
#include "server/worker_registry.h"

namespace slimfit::server {

// Wakes WatchJob streams when any job publishes an event.
class EventSignal {
 public:
  void Notify();
  // Waits until Notify() after `seen` or until `timeout`; returns the current count.
  uint64_t WaitAfter(uint64_t seen, absl::Duration timeout);
  uint64_t count() const;

 private:
  mutable absl::Mutex mutex_;
  absl::CondVar changed_;
  uint64_t count_ ABSL_GUARDED_BY(mutex_) = 0;
};

// One worker runs one shard at a time, whichever job it belongs to.
class WorkerLeases {
 public:
  // Blocks until the worker is free or `*give_up` becomes true (then returns null); the lease is
  // held until the returned object dies.
  std::shared_ptr<void> Acquire(const std::string& worker_id, const std::atomic<bool>* give_up);

 private:
  void Release(const std::string& worker_id);
  absl::Mutex mutex_;
  absl::CondVar released_;
  std::set<std::string> held_ ABSL_GUARDED_BY(mutex_);
};

struct RunnerOptions {
  // A shard's deadline: this plus 10× its predicted compute time.
  absl::Duration shard_timeout = absl::Seconds(120);
  int max_attempts = 5;         // per shard, then the job fails
  double safety_margin = 0.10;  // plans keep predicted peaks under (1 − margin) · budget
  // Replan a worker when its measured peak exceeds the prediction by this factor.
  double replan_ratio = 1.25;
};

struct RunnerDeps {
  StateStore* store = nullptr;
  WorkerRegistry* registry = nullptr;
  WorkerLeases* leases = nullptr;
  EventSignal* signal = nullptr;
  std::string job_dir;       // checkpoints of this job
  std::string worker_token;  // presented to workers
  RunnerOptions options;
};

// The parameters of one published version, immutable.
struct ParameterSnapshot {
  uint64_t version = 0;
  performer::ModelConfig config;
  performer::DType dtype = performer::DType::kFloat32;
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;  // checkpoint layout, CPU
  uint64_t feature_seed = 0;
};

class JobRunner {
 public:
  // `job` as stored; `initial` the job's initial parameters for a fresh job (ignored when the job
  // has checkpoints: it resumes from the latest). FAILED_PRECONDITION/INVALID_ARGUMENT when the
  // checkpoint cannot be restored.
  static absl::StatusOr<std::unique_ptr<JobRunner>> Create(v1::Job job, JobData data, performer::ModelConfig config,
                                                           std::vector<at::Tensor> initial, RunnerDeps deps);
  ~JobRunner();

  void Start();
  // Cancels the job (CANCELLED with "cancelled by client: <reason>") unless it is terminal.
  void Cancel(const std::string& reason);
  // Stops the thread without changing the job's state (coordinator shutdown): RequestStop cancels
  // its calls and returns; Stop also joins. A coordinator stops every runner before joining any.
  void RequestStop();
  void Stop();

  v1::Job Snapshot() const;
  bool terminal() const;
  // The parameters of `version`: ABORTED when older than the current one, NOT_FOUND when newer.
  absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> Parameters(uint64_t version) const;
  int64_t max_documents_per_sequence() const { return data_.max_documents_per_sequence(); }

 private:
  struct WorkerPlan {
    WorkerHandle worker;
    planner::PlanCandidate candidate;
    double tokens_per_second = 0;
  };
  struct Shard {
    int64_t id = 0;
    std::vector<SequenceRef> sequences;
    int64_t expected_tokens = 0;
    int attempt = 1;   // sent to the worker: 1 + reassignments
    int failures = 0;  // attempts that count against RunnerOptions::max_attempts
    size_t worker = 0;  // index into the wave's plans
    std::string last_error;
  };
  struct RoundOutput {
    std::vector<at::Tensor> gradient;
    double loss_sum = 0;
    int64_t tokens = 0;
    int workers = 0;
    int shards = 0;
    int reassigned = 0;
  };

  JobRunner(v1::Job job, JobData data, performer::ModelConfig config, RunnerDeps deps);
  void Run();
  absl::Status RunJob();
  absl::StatusOr<RoundOutput> RunShards(int64_t round, const std::vector<SequenceRef>& sequences, bool evaluate_only);
  absl::StatusOr<std::vector<WorkerPlan>> PlanWorkers(int64_t round);
  absl::Status CallShard(const WorkerPlan& plan, const Shard& shard, int64_t round, uint64_t version,
                         int64_t normalizer, bool evaluate_only, GradientAggregator* aggregator,
                         int64_t* measured_peak);
  void MaybeReplan(const WorkerPlan& plan, int64_t measured_peak, int64_t round);
  // Cancels the calls in flight to workers that can no longer answer them (LOST, LEFT, or
  // re-registered as a new incarnation); DRAINING workers may finish theirs.
  void CancelCallsToGoneWorkers();
  absl::Status Evaluate(int64_t round);
  absl::Status WriteCheckpoint(int64_t round);
  absl::Status RestoreFromCheckpoint();
  void Publish();  // snapshot of the trainer's parameters as the current version

  void SetState(v1::JobState state, const std::string& reason);
  void SetReason(const std::string& reason);
  void Emit(v1::JobEvent event);
  void Persist();
  bool stopping() const { return stop_.load() || cancel_.load(); }
  // The Persist of a round must succeed before the next round is sent out: a version the store
  // does not know could be reused after a restart.
  absl::Status PersistOrFail();

  const RunnerDeps deps_;
  const JobData data_;
  const performer::ModelConfig config_;
  performer::DType dtype_ = performer::DType::kFloat32;
  v1::TokenEncoding encoding_ = v1::TOKEN_ENCODING_UINT8;
  std::unique_ptr<Trainer> trainer_;  // runner thread only
  std::vector<std::vector<int64_t>> shapes_;
  std::map<std::string, planner::PlanCandidate> plans_;  // by worker id@incarnation; runner thread only
  std::map<std::string, double> budget_scale_;           // replans: budget multiplier per worker id
  std::map<std::string, std::pair<performer::Plan, std::string>> replans_;  // previous plan, why
  std::set<std::string> refused_;                        // worker id@incarnation whose plan was refused
  std::vector<double> recent_round_seconds_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_{false};
  std::atomic<bool> stopping_{false};  // stop_ || cancel_, for WorkerLeases::Acquire

  mutable absl::Mutex mutex_;
  v1::Job job_ ABSL_GUARDED_BY(mutex_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mutex_) = 1;
  std::string cancel_reason_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<const ParameterSnapshot> published_ ABSL_GUARDED_BY(mutex_);
  // Calls in flight and the worker each goes to (id, incarnation), so that Cancel/Stop and a worker
  // turning LOST can cancel them.
  std::map<grpc::ClientContext*, std::pair<std::string, uint64_t>> in_flight_ ABSL_GUARDED_BY(mutex_);
  // Calls cancelled because their worker went away: reported as UNAVAILABLE, not as failures.
  std::set<grpc::ClientContext*> cancelled_gone_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_JOB_RUNNER_H_
