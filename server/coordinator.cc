#include "server/coordinator.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "performer/performer_model.h"
#include "planner/device_profile_io.h"
#include "planner/plan_proto.h"
#include "planner/plan_request_builder.h"
#include "planner/plan_search.h"
#include "rpc/rpc_util.h"
#include "server/job_defaults.h"

namespace slimfit::server {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<size_t> ParsePageToken(const std::string& token, absl::string_view kind) {
  if (token.empty()) return 0;
  std::pair<std::string, std::string> parts = absl::StrSplit(token, absl::MaxSplits(':', 1));
  uint64_t offset = 0;
  if (parts.first != kind || !absl::SimpleAtoi(parts.second, &offset)) {
    return absl::OutOfRangeError(absl::StrCat("page_token \"", token, "\" is not from this listing"));
  }
  return static_cast<size_t>(offset);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options) {
  if (options.state_dir.empty()) return absl::InvalidArgumentError("--state_dir is required");
  std::error_code error;
  for (const char* sub : {"", "/uploads", "/jobs"}) {
    fs::create_directories(options.state_dir + sub, error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", options.state_dir, sub, ": ", error.message()));
    }
  }
  std::unique_ptr<Coordinator> coordinator(new Coordinator(std::move(options)));
  absl::StatusOr<std::unique_ptr<StateStore>> store =
      StateStore::Open(coordinator->options_.state_dir + "/state.db");
  if (!store.ok()) return store.status();
  coordinator->store_ = *std::move(store);
  absl::StatusOr<std::unique_ptr<WorkerRegistry>> registry =
      WorkerRegistry::Create(coordinator->store_.get(), coordinator->options_.registry);
  if (!registry.ok()) return registry.status();
  coordinator->registry_ = *std::move(registry);
  coordinator->uploads_ =
      std::make_unique<UploadStore>(coordinator->store_.get(), coordinator->options_.state_dir + "/uploads",
                                    coordinator->options_.upload_limit_bytes);
  coordinator->preparer_ = std::make_unique<JobPreparer>(
      coordinator->store_.get(), coordinator->registry_.get(), coordinator->options_.runner.safety_margin,
      coordinator->options_.max_model_bytes, coordinator->options_.runner.max_sequences_per_shard);
  if (absl::Status resumed = coordinator->ResumeJobs(); !resumed.ok()) return resumed;
  Coordinator* raw = coordinator.get();
  coordinator->liveness_ = base::Thread(
      "liveness", [raw] { return raw->LivenessLoop(); },
      [](const absl::Status& ended) {
        // Without it no worker is marked LOST again: say so at once, not at shutdown.
        if (!ended.ok()) base::LogError(ended.message(), "; silent workers are no longer marked LOST");
      });
  return coordinator;
}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::Shutdown() {
  if (shutting_down_.exchange(true)) return;
  std::map<std::string, std::shared_ptr<JobRunner>> runners;
  {
    absl::MutexLock lock(&mutex_);
    runners = runners_;
  }
  // Every runner stops its calls first, then all are joined: a runner waiting for a worker lease
  // another runner holds must not wait for that runner's call to run out.
  for (auto& [id, runner] : runners) runner->RequestStop();
  for (auto& [id, runner] : runners) runner->Stop();
  // Watch streams wait on their job's signal (or, for a job without a runner, this one): each
  // wakes, sees shutting_down_ and ends.
  signal_.Notify();
  for (auto& [id, runner] : runners) runner->events().Notify();
  (void)liveness_.Join();  // its failure was logged when it ended
}

absl::Status Coordinator::LivenessLoop() {
  while (!shutting_down_.load()) {
    if (!registry_->ExpireSilentWorkers().empty()) signal_.Notify();
    absl::SleepFor(std::min(absl::Milliseconds(250), options_.registry.lost_after / 4));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::ResumeJobs() {
  absl::StatusOr<std::vector<v1::Job>> jobs = store_->ListJobs();
  if (!jobs.ok()) return jobs.status();
  for (const v1::Job& job : *jobs) {
    if (IsTerminal(job.state())) {
      registry_->AddFinishedJob(job.job_id());  // workers may still hold its parameters or state
      continue;
    }
    // A job that crashed before its round-0 checkpoint starts again from its initial parameters.
    absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_->Checkpoints(job.job_id());
    if (!checkpoints.ok()) return checkpoints.status();
    absl::StatusOr<PreparedJob> prepared =
        preparer_->Prepare(job.spec(), /*load_initial=*/checkpoints->empty());
    absl::Status started = prepared.ok() ? StartRunner(job, *std::move(prepared)) : prepared.status();
    if (!started.ok()) {
      v1::Job failed = job;
      failed.set_state(v1::JOB_STATE_FAILED);
      failed.set_state_reason(absl::StrCat("could not resume after a restart: ", started.message()));
      *failed.mutable_finished_at() = NowTimestamp();
      *failed.mutable_state_changed_at() = failed.finished_at();
      base::LogError(job.job_id(), ": ", failed.state_reason());
      if (absl::Status stored = store_->PutJob(failed); !stored.ok()) return stored;
      absl::StatusOr<int64_t> last = store_->LastEventSequence(job.job_id());
      if (!last.ok()) return last.status();
      v1::JobEvent event;
      event.set_sequence(*last + 1);
      event.set_job_id(job.job_id());
      *event.mutable_time() = failed.finished_at();
      event.mutable_state_changed()->set_previous(job.state());
      event.mutable_state_changed()->set_state(v1::JOB_STATE_FAILED);
      event.mutable_state_changed()->set_reason(failed.state_reason());
      if (absl::Status stored = store_->AppendEvent(event); !stored.ok()) return stored;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<UploadSink>> Coordinator::BeginUpload(
    const v1::UploadMetadata& metadata, std::optional<v1::DatasetInfo>* existing) {
  return uploads_->BeginUpload(metadata, existing);
}

absl::Status Coordinator::StartRunner(const v1::Job& job, PreparedJob prepared) {
  std::vector<at::Tensor> initial = std::move(prepared.initial);
  RunnerDeps deps;
  deps.store = store_.get();
  deps.registry = registry_.get();
  deps.leases = &leases_;
  deps.signal = &signal_;
  deps.job_dir = absl::StrCat(options_.state_dir, "/jobs/", job.job_id());
  deps.options = options_.runner;
  deps.event_observer = options_.event_observer;
  // A resumed job none of whose checkpoints verifies starts over from its initial parameters.
  deps.initial_parameters = [preparer = preparer_.get(), spec = job.spec()] {
    return preparer->InitialParameters(spec);
  };
  std::error_code error;
  fs::create_directories(deps.job_dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", deps.job_dir, ": ", error.message()));
  absl::StatusOr<std::unique_ptr<JobRunner>> runner =
      JobRunner::Create(job, *std::move(prepared.data), prepared.config, std::move(initial), std::move(deps));
  if (!runner.ok()) return runner.status();
  std::shared_ptr<JobRunner> shared = *std::move(runner);
  {
    absl::MutexLock lock(&mutex_);
    runners_[job.job_id()] = shared;
  }
  shared->Start();
  return absl::OkStatus();
}

std::shared_ptr<JobRunner> Coordinator::Runner(const std::string& job_id) {
  absl::MutexLock lock(&mutex_);
  auto it = runners_.find(job_id);
  return it == runners_.end() ? nullptr : it->second;
}

absl::StatusOr<v1::Job> Coordinator::SubmitJob(const v1::SubmitJobRequest& request) {
  if (request.request_id().size() > static_cast<size_t>(v1::LIMIT_MAX_NAME_BYTES)) {
    return rpc::InvalidFieldError("request_id", "longer than 256 bytes");
  }
  // A retried submission gets its job, whatever has changed since (checked again under the lock).
  auto existing_job = [&]() -> absl::StatusOr<std::optional<v1::Job>> {
    if (request.request_id().empty()) return std::optional<v1::Job>();
    return store_->FindJobByRequestId(request.request_id());
  };
  absl::StatusOr<std::optional<v1::Job>> existing = existing_job();
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return **existing;
  // Worker-local datasets named by digest, and their layouts asked of their holders before the lock
  // (a slow holder must not hold up other submissions); Prepare then reads them from the store.
  absl::StatusOr<v1::JobSpec> resolved = preparer_->ResolveLocalDatasets(WithJobDefaults(request.spec()));
  if (!resolved.ok()) return resolved.status();
  if (absl::Status fetched = preparer_->FetchLayouts(*resolved); !fetched.ok()) return fetched;
  const v1::JobSpec& spec = *resolved;
  // One submission at a time: a request id is looked up and recorded atomically.
  absl::MutexLock submit_lock(&submit_mutex_);
  existing = existing_job();
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return **existing;
  absl::StatusOr<PreparedJob> prepared = preparer_->Prepare(spec, /*load_initial=*/true);
  if (!prepared.ok()) return prepared.status();
  if (absl::Status fits = preparer_->CheckSomeWorkerFits(spec, prepared->config,
                                                         prepared->data->max_documents_per_sequence());
      !fits.ok()) {
    return fits;
  }
  absl::StatusOr<int64_t> number = store_->NextJobNumber();
  if (!number.ok()) return number.status();
  v1::Job job;
  job.set_job_id(absl::StrFormat("job-%06d", *number));
  *job.mutable_spec() = spec;
  if (job.spec().name().empty()) job.mutable_spec()->set_name(job.job_id());
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_state_reason("waiting for eligible workers");
  *job.mutable_created_at() = NowTimestamp();
  *job.mutable_state_changed_at() = job.created_at();
  job.mutable_progress()->set_rounds(spec.rounds());
  job.mutable_progress()->set_parameter_version(1);
  job.set_training_tokens(prepared->data->training_tokens());
  job.set_held_out_tokens(prepared->data->held_out_tokens());
  if (absl::Status stored = store_->PutJob(job, request.request_id()); !stored.ok()) return stored;
  v1::JobEvent created;
  created.set_sequence(1);
  created.set_job_id(job.job_id());
  *created.mutable_time() = NowTimestamp();
  created.mutable_state_changed()->set_previous(v1::JOB_STATE_UNSPECIFIED);
  created.mutable_state_changed()->set_state(v1::JOB_STATE_QUEUED);
  created.mutable_state_changed()->set_reason("submitted");
  if (absl::Status stored = store_->AppendEvent(created); !stored.ok()) return stored;
  base::LogInfo(job.job_id(), ": submitted (", job.spec().rounds(),
                " rounds, L = ", job.spec().sequence_length(), ", ", job.training_tokens(),
                " training tokens)");
  if (absl::Status started = StartRunner(job, *std::move(prepared)); !started.ok()) {
    job.set_state(v1::JOB_STATE_FAILED);
    job.set_state_reason(absl::StrCat("could not start: ", started.message()));
    (void)store_->PutJob(job);
    return started;
  }
  return job;
}

absl::StatusOr<v1::Job> Coordinator::GetJob(const std::string& job_id) {
  if (std::shared_ptr<JobRunner> runner = Runner(job_id); runner != nullptr) return runner->Snapshot();
  absl::StatusOr<std::optional<v1::Job>> job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (!job->has_value()) return rpc::NotFoundResourceError("job", job_id, absl::StrCat("no job ", job_id));
  return **job;
}

absl::StatusOr<v1::ListJobsResponse> Coordinator::ListJobs(const v1::ListJobsRequest& request) {
  if (request.page_size() < 0 || request.page_size() > v1::LIMIT_MAX_PAGE_SIZE) {
    return rpc::InvalidFieldError("page_size", absl::StrCat("must be 0..", v1::LIMIT_MAX_PAGE_SIZE));
  }
  absl::StatusOr<size_t> offset = ParsePageToken(request.page_token(), "jobs");
  if (!offset.ok()) return offset.status();
  const size_t page = request.page_size() == 0 ? 50 : static_cast<size_t>(request.page_size());
  absl::StatusOr<std::vector<v1::Job>> jobs = store_->ListJobs();
  if (!jobs.ok()) return jobs.status();
  std::vector<v1::Job> selected;
  for (const v1::Job& stored : *jobs) {
    absl::StatusOr<v1::Job> job = GetJob(stored.job_id());  // live state for running jobs
    const v1::Job& current = job.ok() ? *job : stored;
    if (request.states_size() > 0 && std::find(request.states().begin(), request.states().end(),
                                               current.state()) == request.states().end()) {
      continue;
    }
    selected.push_back(current);
  }
  v1::ListJobsResponse response;
  for (size_t i = *offset; i < selected.size() && i < *offset + page; ++i) *response.add_jobs() = selected[i];
  if (*offset + page < selected.size()) response.set_next_page_token(absl::StrCat("jobs:", *offset + page));
  return response;
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(const v1::CancelJobRequest& request, absl::Time deadline) {
  if (request.reason().size() > 1024) return rpc::InvalidFieldError("reason", "longer than 1024 bytes");
  const absl::Time now = absl::Now();
  if (deadline == absl::InfiniteFuture()) deadline = now + kCancelWaitWithoutDeadline;
  absl::StatusOr<v1::Job> job = GetJob(request.job_id());
  if (!job.ok()) return job.status();
  if (job->state() == v1::JOB_STATE_CANCELLED) return job;
  if (IsTerminal(job->state())) {
    return absl::FailedPreconditionError(absl::StrCat("job ", request.job_id(), " already ",
                                                      v1::JobState_Name(job->state()), ": not cancellable"));
  }
  std::shared_ptr<JobRunner> runner = Runner(request.job_id());
  if (runner == nullptr) return absl::InternalError(absl::StrCat("job ", request.job_id(), " has no runner"));
  runner->Cancel(request.reason());
  // The answer leaves a tenth of the time left (at most a second) before the caller's deadline,
  // so that it arrives before the caller gives up on its own.
  const absl::Time answer_by =
      deadline - std::min(absl::Seconds(1), std::max(absl::ZeroDuration(), deadline - now) / 10);
  if (!runner->AwaitTerminal(answer_by)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "job ", request.job_id(),
        ": cancellation requested and in progress (the job stops once its calls to workers and the "
        "checkpoint being written, if any, have ended); cancel again to wait again, or watch the job"));
  }
  // Terminal, but not necessarily by this request: a job that finished meanwhile keeps its state.
  v1::Job stopped = runner->Snapshot();
  if (stopped.state() != v1::JOB_STATE_CANCELLED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " ", v1::JobState_Name(stopped.state()),
                     " before it could be cancelled: ", stopped.state_reason()));
  }
  return stopped;
}

absl::Status Coordinator::WatchJob(const v1::WatchJobRequest& request,
                                   const std::function<bool(const v1::JobEvent&)>& emit,
                                   const std::function<bool()>& cancelled) {
  if (request.after_sequence() < 0) return rpc::InvalidFieldError("after_sequence", "must be ≥ 0");
  // The job's own signal. A job without a runner here is terminal (or about to be recorded so,
  // having failed to start): it has no changes to wait for but the coordinator's shutdown.
  std::shared_ptr<JobRunner> runner = Runner(request.job_id());
  EventSignal& changes = runner != nullptr ? runner->events() : signal_;
  uint64_t seen = changes.count();
  // The sequence is read before the snapshot: an event in between is then replayed, not lost.
  absl::StatusOr<int64_t> last = store_->LastEventSequence(request.job_id());
  if (!last.ok()) return last.status();
  absl::StatusOr<v1::Job> job = GetJob(request.job_id());
  if (!job.ok()) return job.status();
  v1::JobEvent snapshot;
  snapshot.set_sequence(*last);
  snapshot.set_job_id(request.job_id());
  *snapshot.mutable_time() = NowTimestamp();
  *snapshot.mutable_snapshot() = *job;
  if (!emit(snapshot)) return absl::OkStatus();
  int64_t after = request.from_start() ? 0 : request.after_sequence() > 0 ? request.after_sequence() : *last;
  const bool terminal_at_start = IsTerminal(job->state());
  constexpr absl::Duration kTerminalGrace = absl::Seconds(1);
  absl::Time quiet_since = absl::InfinitePast();
  // The store is read at the start, after every change of the job, while events come in pages,
  // and during the grace below; a wake to check on the client alone reads nothing.
  bool look = true;
  while (true) {
    bool more = false;
    if (look) {
      absl::StatusOr<std::vector<v1::JobEvent>> events = store_->Events(request.job_id(), after);
      if (!events.ok()) return events.status();
      for (const v1::JobEvent& event : *events) {
        if (!emit(event)) return absl::OkStatus();
        after = event.sequence();
        if (event.has_state_changed() && IsTerminal(event.state_changed().state())) return absl::OkStatus();
      }
      more = !events->empty();
      if (events->empty()) {
        // A terminal job's last event is its terminal state change; the stream ends after it. A job
        // already terminal when the stream began has nothing more to say; one that turned terminal
        // without an event (a failure recorded outside its runner) gets a second's grace.
        if (terminal_at_start) return absl::OkStatus();
        absl::StatusOr<v1::Job> now = GetJob(request.job_id());
        if (!now.ok()) return now.status();
        if (IsTerminal(now->state())) {
          if (quiet_since == absl::InfinitePast()) quiet_since = absl::Now();
          if (absl::Now() - quiet_since > kTerminalGrace) return absl::OkStatus();
        }
      }
    }
    if (cancelled()) return absl::CancelledError("client went away");
    if (shutting_down_.load()) return absl::UnavailableError("coordinator shutting down: reconnect");
    absl::Duration wait = more ? absl::ZeroDuration() : options_.watch_check_interval;
    if (quiet_since != absl::InfinitePast()) {
      wait = std::min(wait, std::max(absl::ZeroDuration(), quiet_since + kTerminalGrace - absl::Now()) +
                                absl::Milliseconds(1));
    }
    const uint64_t now = changes.WaitAfter(seen, wait);
    look = now != seen || more || quiet_since != absl::InfinitePast();
    seen = now;
  }
}

absl::StatusOr<v1::ListWorkersResponse> Coordinator::ListWorkers(const v1::ListWorkersRequest& request) {
  if (request.page_size() < 0 || request.page_size() > v1::LIMIT_MAX_PAGE_SIZE) {
    return rpc::InvalidFieldError("page_size", absl::StrCat("must be 0..", v1::LIMIT_MAX_PAGE_SIZE));
  }
  absl::StatusOr<size_t> offset = ParsePageToken(request.page_token(), "workers");
  if (!offset.ok()) return offset.status();
  const size_t page = request.page_size() == 0 ? 100 : static_cast<size_t>(request.page_size());
  std::vector<v1::WorkerInfo> workers = registry_->List(request.include_gone());
  v1::ListWorkersResponse response;
  for (size_t i = *offset; i < workers.size() && i < *offset + page; ++i)
    *response.add_workers() = workers[i];
  if (*offset + page < workers.size()) response.set_next_page_token(absl::StrCat("workers:", *offset + page));
  return response;
}

absl::StatusOr<planner::PlanSearchRequest> Coordinator::JobPlanSearch(const std::string& job_id,
                                                                      double safety_margin,
                                                                      int64_t* reserved_bytes) {
  absl::StatusOr<v1::Job> job = GetJob(job_id);
  if (!job.ok()) return job.status();
  absl::StatusOr<performer::ModelConfig> config = preparer_->ResolveModel(job->spec().model(), nullptr);
  if (!config.ok()) return config.status();
  std::shared_ptr<JobRunner> runner = Runner(job_id);
  // As the job's worker planner builds it (server/worker_planner.cc), --max_sequences_per_shard
  // included.
  absl::StatusOr<planner::PlanSearchRequest> search = planner::JobPlanSearchRequest(
      job->spec(), *config, runner != nullptr ? runner->max_documents_per_sequence() : 1,
      options_.runner.max_sequences_per_shard, safety_margin);
  if (!search.ok()) return search.status();
  *reserved_bytes = ReservedBytesPerWorker(job->spec(), *config);
  return search;
}

absl::StatusOr<WorkerPlanSearch> Coordinator::SearchPlansForJob(const std::string& job_id,
                                                                const std::string& worker_id) {
  int64_t reserved = 0;
  absl::StatusOr<planner::PlanSearchRequest> search =
      JobPlanSearch(job_id, options_.runner.safety_margin, &reserved);
  if (!search.ok()) return search.status();
  std::optional<v1::WorkerInfo> worker = registry_->Info(worker_id);
  if (!worker.has_value()) {
    return rpc::NotFoundResourceError("worker", worker_id, absl::StrCat("no worker ", worker_id));
  }
  search->memory_budget_bytes =
      PlanSearchBudget(worker->memory_budget_bytes(), reserved, search->safety_margin);
  absl::StatusOr<planner::PlanSearchResult> result =
      planner::SearchPlans(*search, planner::DeviceProfileFromProto(worker->profile()));
  if (!result.ok()) return result.status();
  WorkerPlanSearch found;
  found.result = *std::move(result);
  found.budget_bytes = worker->memory_budget_bytes();
  // What the plan may use: the budget less the margin, less what a local-steps job holds beside it.
  found.usable_bytes = std::max<int64_t>(
      0,
      static_cast<int64_t>(static_cast<double>(found.budget_bytes) * (1 - search->safety_margin)) - reserved);
  return found;
}

std::vector<v1::Job> Coordinator::ActiveJobs() {
  std::vector<v1::Job> jobs;
  absl::MutexLock lock(&mutex_);
  for (const auto& [id, runner] : runners_) {
    v1::Job job = runner->Snapshot();
    if (!IsTerminal(job.state())) jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<std::vector<v1::JobEvent>> Coordinator::JobEvents(const std::string& job_id) {
  return store_->Events(job_id, 0, kMaxJobEvents);
}

absl::StatusOr<v1::GetMemoryPlanResponse> Coordinator::GetMemoryPlan(
    const v1::GetMemoryPlanRequest& request) {
  planner::PlanSearchRequest search;
  int64_t reserved = 0;  // a local-steps job's inner optimizer, beside each worker's plan
  const double safety_margin =
      request.has_safety_margin() ? request.safety_margin() : options_.runner.safety_margin;
  switch (request.workload_case()) {
    case v1::GetMemoryPlanRequest::kJobId: {
      absl::StatusOr<planner::PlanSearchRequest> job_search =
          JobPlanSearch(request.job_id(), safety_margin, &reserved);
      if (!job_search.ok()) return job_search.status();
      if (request.has_dtype() && request.dtype() != planner::DTypeToProto(job_search->dtype)) {
        return rpc::InvalidFieldError("dtype", "must be absent or the job's dtype");
      }
      if (request.has_bf16_products() && request.bf16_products() != job_search->bf16_products) {
        return rpc::InvalidFieldError("bf16_products", "must be absent or the job's bf16_products");
      }
      search = *std::move(job_search);
      break;
    }
    case v1::GetMemoryPlanRequest::kSpec: {
      absl::StatusOr<performer::ModelConfig> config =
          preparer_->ResolveModel(request.spec().model(), nullptr);
      if (!config.ok()) return config.status();
      planner::PlanRequestInputs inputs;
      inputs.model = *config;
      inputs.sequence_length = request.spec().sequence_length();
      inputs.documents = request.spec().has_documents() ? request.spec().documents() : 1;
      if (request.has_dtype()) {
        absl::StatusOr<performer::DType> dtype = planner::DTypeFromProto(request.dtype(), "dtype");
        if (!dtype.ok()) return dtype.status();
        inputs.dtype = *dtype;
      }
      inputs.bf16_products = request.bf16_products();
      inputs.safety_margin = safety_margin;
      planner::PlanRequestFields fields;
      fields.sequence_length = "spec.sequence_length";
      fields.documents = "spec.documents";
      absl::StatusOr<planner::PlanSearchRequest> built = planner::BuildPlanSearchRequest(inputs, fields);
      if (!built.ok()) return built.status();
      search = *std::move(built);
      break;
    }
    default:
      return rpc::InvalidFieldError("workload", "set job_id or spec");
  }
  search.objective = planner::ObjectiveFromProto(request.objective());

  std::vector<v1::WorkerInfo> targets;
  std::string next_page_token;
  bool include_frontier = true;
  if (request.target_case() == v1::GetMemoryPlanRequest::kWorkerId) {
    std::optional<v1::WorkerInfo> info = registry_->Info(request.worker_id());
    if (!info.has_value())
      return rpc::NotFoundResourceError("worker", request.worker_id(),
                                        absl::StrCat("no worker ", request.worker_id()));
    if (info->state() == v1::WORKER_STATE_LOST) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", request.worker_id(), " is LOST"));
    }
    targets.push_back(*info);
    include_frontier = request.has_include_frontier() ? request.include_frontier() : true;
  } else if (request.target_case() == v1::GetMemoryPlanRequest::kAllWorkers && request.all_workers()) {
    include_frontier = request.has_include_frontier() ? request.include_frontier() : false;
    if (request.page_size() < 0 || request.page_size() > 50)
      return rpc::InvalidFieldError("page_size", "must be 0..50");
    absl::StatusOr<size_t> offset = ParsePageToken(request.page_token(), "plans");
    if (!offset.ok()) return offset.status();
    std::vector<v1::WorkerInfo> live = registry_->List(false);
    const size_t page = request.page_size() == 0 ? 20 : static_cast<size_t>(request.page_size());
    for (size_t i = *offset; i < live.size() && i < *offset + page; ++i) targets.push_back(live[i]);
    if (*offset + page < live.size()) next_page_token = absl::StrCat("plans:", *offset + page);
  } else {
    return rpc::InvalidFieldError("target", "set worker_id or all_workers");
  }
  v1::GetMemoryPlanResponse response;
  response.set_next_page_token(next_page_token);
  for (const v1::WorkerInfo& worker : targets) {
    search.memory_budget_bytes =
        PlanSearchBudget(worker.memory_budget_bytes(), reserved, search.safety_margin);
    absl::StatusOr<v1::MemoryPlan> plan = planner::SearchMemoryPlan(
        search, planner::DeviceProfileFromProto(worker.profile()), include_frontier);
    if (!plan.ok()) return plan.status();
    plan->set_worker_id(worker.worker_id());
    *response.add_plans() = *std::move(plan);
  }
  return response;
}

absl::StatusOr<CheckpointRecord> Coordinator::ExportCheckpoint(const v1::ExportModelRequest& request,
                                                               v1::ExportHeader* header) {
  absl::StatusOr<v1::Job> job = GetJob(request.job_id());
  if (!job.ok()) return job.status();
  if (request.has_round() && request.round() < 0) return rpc::InvalidFieldError("round", "must be ≥ 0");
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_->Checkpoints(request.job_id());
  if (!checkpoints.ok()) return checkpoints.status();
  if (checkpoints->empty()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", request.job_id(), " has no checkpoint yet"));
  }
  const CheckpointRecord* chosen = &checkpoints->back();
  if (request.has_round()) {
    chosen = nullptr;
    for (const CheckpointRecord& c : *checkpoints) {
      if (c.round == request.round()) chosen = &c;
    }
    if (chosen == nullptr) {
      return rpc::NotFoundResourceError(
          "checkpoint", request.job_id(),
          absl::StrCat("job ", request.job_id(), " has no checkpoint of round ", request.round()));
    }
  }
  absl::StatusOr<performer::ModelConfig> config = preparer_->ResolveModel(job->spec().model(), nullptr);
  if (!config.ok()) return config.status();
  header->set_job_id(request.job_id());
  header->set_round(chosen->round);
  header->set_parameter_version(chosen->parameter_version);
  *header->mutable_config() = planner::ModelConfigToProto(*config);
  header->set_total_bytes(chosen->bytes);
  header->set_file_name(absl::StrFormat("%s-r%d.safetensors", request.job_id(), chosen->round));
  return *chosen;
}

absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> Coordinator::Parameters(
    const v1::FetchParametersRequest& request) {
  std::shared_ptr<JobRunner> runner = Runner(request.job_id());
  if (runner == nullptr) {
    absl::StatusOr<v1::Job> job = GetJob(request.job_id());
    if (!job.ok()) return job.status();
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " is ", v1::JobState_Name(job->state())));
  }
  return runner->Parameters(request.parameter_version());
}

}  // namespace slimfit::server
