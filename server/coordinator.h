// The coordinator's state machine behind its gRPC edge (coordinator_service.h): datasets and
// uploads, job submission and validation, the job runners, worker registry and liveness, memory
// plans, parameter publication and checkpoint export — everything durable under one state
// directory:
//
//   <state_dir>/state.db                    SQLite (StateStore)
//   <state_dir>/uploads/<id>                uploaded datasets and checkpoints, content-addressed
//   <state_dir>/jobs/<job_id>/round-*.safetensors   checkpoints (+ .optimizer.safetensors)
//
// On Create, jobs left QUEUED or RUNNING by a previous process resume from their newest checkpoint
// that still verifies (JobRunner; JobResumed says from where).
//
// Thread safety: thread-safe; RPC handlers call in from gRPC's threads.
#ifndef SLIMFIT_SERVER_COORDINATOR_H_
#define SLIMFIT_SERVER_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/thread.h"
#include "performer/model_config.h"
#include "planner/plan_search.h"
#include "proto/slimfit.pb.h"
#include "server/event_signal.h"
#include "server/job_preparer.h"
#include "server/job_runner.h"
#include "server/state_store.h"
#include "server/upload_store.h"
#include "server/worker_leases.h"
#include "server/worker_registry.h"

namespace slimfit::server {

struct CoordinatorOptions {
  std::string state_dir;
  RegistryOptions registry;
  RunnerOptions runner;
  int64_t upload_limit_bytes = int64_t{1} << 30;
  int64_t max_model_bytes = kDefaultMaxModelBytes;  // see JobPreparer
  // Sees every event a job publishes, after it is stored (the daemon's metrics). May be empty.
  JobEventObserver event_observer;
  // How often a WatchJob stream with nothing to send asks whether its client went away (a
  // synchronous gRPC handler learns it only by asking). Its job's own changes wake it at once.
  absl::Duration watch_check_interval = absl::Milliseconds(250);
};

// How long CancelJob waits for the job to stop when its caller gave no deadline.
inline constexpr absl::Duration kCancelWaitWithoutDeadline = absl::Seconds(60);

// A plan search for one worker and one job, as the job's runner would plan it.
struct WorkerPlanSearch {
  planner::PlanSearchResult result;
  int64_t budget_bytes = 0;
  int64_t usable_bytes = 0;  // the budget less the safety margin
};

class Coordinator {
 public:
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options);
  ~Coordinator();

  // Stops job runners (jobs stay RUNNING in the store and resume at the next start) and the
  // liveness thread. Idempotent.
  void Shutdown();

  // Uploads. Begin validates the metadata; a stored upload with the same digest and type is
  // returned at once (`existing`).
  absl::StatusOr<std::unique_ptr<UploadSink>> BeginUpload(const v1::UploadMetadata& metadata,
                                                          std::optional<v1::DatasetInfo>* existing);

  absl::StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  // Asks the job's runner to cancel it and waits until the runner has stopped it (CANCELLED),
  // answering a little before `deadline` (the caller's; InfiniteFuture: kCancelWaitWithoutDeadline)
  // so that the caller reads the answer rather than its own timeout. Idempotent: a cancelled job is
  // returned at once. DEADLINE_EXCEEDED when the job has not stopped in time: the cancellation
  // was requested and goes on, and a second call waits again. NOT_FOUND for an unknown job;
  // FAILED_PRECONDITION for one that already SUCCEEDED or FAILED.
  absl::StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request,
                                    absl::Time deadline = absl::InfiniteFuture());
  // Streams the snapshot and events; `emit` returns false when the stream broke; `cancelled`
  // says whether the client went away (asked every options.watch_check_interval while nothing
  // happens, and after every wake). Wakes for this job's changes only (JobRecord::events), never
  // another job's. UNAVAILABLE when the coordinator shuts down.
  absl::Status WatchJob(const v1::WatchJobRequest& request,
                        const std::function<bool(const v1::JobEvent&)>& emit,
                        const std::function<bool()>& cancelled);

  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(const v1::ListWorkersRequest& request);
  absl::StatusOr<v1::GetMemoryPlanResponse> GetMemoryPlan(const v1::GetMemoryPlanRequest& request);
  // The whole search (every candidate, the frontier) for `worker_id` on `job_id`'s workload: what
  // the status page draws. NOT_FOUND for an unknown job or worker; the planner's errors
  // (RESOURCE_EXHAUSTED when nothing fits the worker's budget).
  absl::StatusOr<WorkerPlanSearch> SearchPlansForJob(const std::string& job_id, const std::string& worker_id);

  // Jobs this process runs that are not terminal (QUEUED, RUNNING), from memory.
  std::vector<v1::Job> ActiveJobs();
  // The retained events of a job, oldest first (at most kMaxJobEvents).
  static constexpr int64_t kMaxJobEvents = 100000;
  absl::StatusOr<std::vector<v1::JobEvent>> JobEvents(const std::string& job_id);

  // The checkpoint to export (the latest, or of `round`).
  absl::StatusOr<CheckpointRecord> ExportCheckpoint(const v1::ExportModelRequest& request,
                                                    v1::ExportHeader* header);

  // The parameters a worker asks for.
  absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> Parameters(
      const v1::FetchParametersRequest& request);

  WorkerRegistry& registry() { return *registry_; }
  // Wakes job runners and watchers after a change to the workers made outside the registry's own
  // calls (a revocation).
  void WorkersChanged() { signal_.Notify(); }

 private:
  explicit Coordinator(CoordinatorOptions options) : options_(std::move(options)) {}
  absl::Status ResumeJobs();
  // The planner's request for `job_id`'s workload (planner::JobPlanSearchRequest: model, L,
  // documents, shards, dtype) with `safety_margin`; no budget. The plan search a job's workers get;
  // *reserved_bytes: what each holds beside the plan (ReservedBytesPerWorker), to come off every
  // worker's budget (PlanSearchBudget). INVALID_ARGUMENT "safety_margin: …" outside [0, 1).
  absl::StatusOr<planner::PlanSearchRequest> JobPlanSearch(const std::string& job_id, double safety_margin,
                                                           int64_t* reserved_bytes);
  absl::Status StartRunner(const v1::Job& job, PreparedJob prepared);
  std::shared_ptr<JobRunner> Runner(const std::string& job_id);
  absl::Status LivenessLoop();

  const CoordinatorOptions options_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<UploadStore> uploads_;
  std::unique_ptr<JobPreparer> preparer_;
  WorkerLeases leases_;
  EventSignal signal_;
  std::atomic<bool> shutting_down_{false};
  base::Thread liveness_;

  absl::Mutex submit_mutex_;  // one submission at a time (request-id deduplication)
  absl::Mutex mutex_;         // the runner table
  std::map<std::string, std::shared_ptr<JobRunner>> runners_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_COORDINATOR_H_
