#include "server/job_runner.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/time_util.h"
#include "performer/performer_model.h"
#include "performer/tensor_chunks.h"
#include "performer/safetensors.h"
#include "planner/plan_proto.h"
#include "base/log.h"
#include "proto/rpc_util.h"
#include "base/sha256.h"
#include "proto/token_codec.h"
#include "server/shard_split.h"

namespace slimfit::server {
namespace {

using google::protobuf::util::TimeUtil;

google::protobuf::Timestamp Now() { return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(absl::Now())); }

constexpr double kLn2 = 0.69314718055994530942;

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED || state == v1::JOB_STATE_CANCELLED;
}

std::string WorkerKey(const WorkerHandle& worker) { return absl::StrCat(worker.worker_id, "@", worker.incarnation); }

}  // namespace

void EventSignal::Notify() {
  absl::MutexLock lock(&mutex_);
  ++count_;
  changed_.SignalAll();
}

uint64_t EventSignal::WaitAfter(uint64_t seen, absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  const absl::Time deadline = absl::Now() + timeout;
  while (count_ == seen) {
    if (changed_.WaitWithDeadline(&mutex_, deadline)) break;
  }
  return count_;
}

uint64_t EventSignal::count() const {
  absl::MutexLock lock(&mutex_);
  return count_;
}

std::shared_ptr<void> WorkerLeases::Acquire(const std::string& worker_id, const std::atomic<bool>* give_up) {
  absl::MutexLock lock(&mutex_);
  while (held_.count(worker_id) > 0) {
    if (give_up->load()) return nullptr;
    released_.WaitWithTimeout(&mutex_, absl::Milliseconds(100));  // the timeout notices give_up
  }
  held_.insert(worker_id);
  // Non-null (it points at this object, which the deleter does not free): null means gave up.
  return std::shared_ptr<void>(static_cast<void*>(this), [this, worker_id](void*) { Release(worker_id); });
}

void WorkerLeases::Release(const std::string& worker_id) {
  absl::MutexLock lock(&mutex_);
  held_.erase(worker_id);
  released_.SignalAll();
}

absl::StatusOr<std::unique_ptr<JobRunner>> JobRunner::Create(v1::Job job, JobData data, performer::ModelConfig config,
                                                             std::vector<at::Tensor> initial, RunnerDeps deps) {
  std::unique_ptr<JobRunner> runner(new JobRunner(std::move(job), std::move(data), config, std::move(deps)));
  const v1::JobSpec& spec = runner->job_.spec();
  runner->dtype_ = spec.dtype() == v1::DTYPE_FLOAT64 ? performer::DType::kFloat64 : performer::DType::kFloat32;
  runner->encoding_ = rpc::NarrowestTokenEncoding(config.vocab);
  runner->shapes_ = performer::ParameterShapes(config);
  absl::StatusOr<int64_t> last_sequence = runner->deps_.store->LastEventSequence(runner->job_.job_id());
  if (!last_sequence.ok()) return last_sequence.status();
  runner->next_sequence_ = *last_sequence + 1;

  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = runner->deps_.store->Checkpoints(runner->job_.job_id());
  if (!checkpoints.ok()) return checkpoints.status();
  if (checkpoints->empty()) {
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, runner->dtype_, std::move(initial), spec.optimizer());
    if (!trainer.ok()) return trainer.status();
    runner->trainer_ = *std::move(trainer);
    v1::JobProgress* progress = runner->job_.mutable_progress();
    progress->set_rounds(spec.rounds());
    if (progress->parameter_version() == 0) progress->set_parameter_version(1);
  } else {
    if (absl::Status restored = runner->RestoreFromCheckpoint(); !restored.ok()) return restored;
  }
  runner->job_.set_training_tokens(runner->data_.training_tokens());
  runner->job_.set_held_out_tokens(runner->data_.held_out_tokens());
  runner->Publish();
  return runner;
}

JobRunner::JobRunner(v1::Job job, JobData data, performer::ModelConfig config, RunnerDeps deps)
    : deps_(std::move(deps)), data_(std::move(data)), config_(config), job_(std::move(job)) {}

JobRunner::~JobRunner() { Stop(); }

absl::Status JobRunner::RestoreFromCheckpoint() {
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = deps_.store->Checkpoints(job_.job_id());
  if (!checkpoints.ok()) return checkpoints.status();
  const CheckpointRecord& latest = checkpoints->back();
  absl::StatusOr<performer::TensorFile> file = performer::ReadSafetensors(latest.model_path);
  if (!file.ok()) return file.status();
  std::vector<at::Tensor> parameters;
  for (const std::string& name : performer::ParameterNames(config_)) {
    auto it = file->tensors.find(name);
    if (it == file->tensors.end()) {
      return absl::DataLossError(absl::StrCat(latest.model_path, ": checkpoint lacks ", name));
    }
    parameters.push_back(it->second);
  }
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(config_, dtype_, std::move(parameters), job_.spec().optimizer());
  if (!trainer.ok()) return trainer.status();
  trainer_ = *std::move(trainer);
  if (absl::Status loaded = trainer_->LoadOptimizerState(latest.optimizer_path); !loaded.ok()) return loaded;
  absl::MutexLock lock(&mutex_);
  v1::JobProgress* progress = job_.mutable_progress();
  int64_t tokens_trained = 0;
  if (auto it = file->metadata.find("tokens_trained"); it != file->metadata.end()) {
    (void)absl::SimpleAtoi(it->second, &tokens_trained);
  }
  progress->set_rounds(job_.spec().rounds());
  progress->set_rounds_completed(latest.round);
  progress->set_tokens_trained(tokens_trained);
  progress->set_checkpoint_round(latest.round);
  // Versions are never reused: continue above anything this job published before the restart.
  progress->set_parameter_version(std::max<uint64_t>(progress->parameter_version(), latest.parameter_version) + 1);
  base::LogInfo(job_.job_id(), ": resuming from the round-", latest.round, " checkpoint as parameter version ",
               progress->parameter_version());
  return absl::OkStatus();
}

void JobRunner::Publish() {
  auto snapshot = std::make_shared<ParameterSnapshot>();
  snapshot->config = config_;
  snapshot->dtype = dtype_;
  snapshot->names = trainer_->names();
  for (const at::Tensor& p : trainer_->parameters()) snapshot->tensors.push_back(p.detach().clone());
  snapshot->feature_seed = job_.spec().seed();
  absl::MutexLock lock(&mutex_);
  snapshot->version = job_.progress().parameter_version();
  published_ = std::move(snapshot);
}

absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> JobRunner::Parameters(uint64_t version) const {
  absl::MutexLock lock(&mutex_);
  if (IsTerminal(job_.state())) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_.job_id(), " is ", v1::JobState_Name(job_.state())));
  }
  const uint64_t current = published_->version;
  if (version < current) {
    v1::ErrorDetail detail;
    detail.set_current_parameter_version(current);
    return rpc::AttachErrorDetail(
        absl::AbortedError(absl::StrCat("parameter version ", version, " of ", job_.job_id(),
                                        " is stale; the current version is ", current)),
        detail);
  }
  if (version > current) {
    return absl::NotFoundError(absl::StrCat("parameter version ", version, " of ", job_.job_id(),
                                            " was never published (current ", current, ")"));
  }
  return published_;
}

void JobRunner::Start() { thread_ = std::thread([this] { Run(); }); }

void JobRunner::Cancel(const std::string& reason) {
  absl::MutexLock lock(&mutex_);
  if (IsTerminal(job_.state())) return;
  cancel_reason_ = reason;
  // Set before cancelling, so a call registering after this sees it (CallShard checks under the lock).
  cancel_.store(true);
  stopping_.store(true);
  for (auto& [context, worker] : in_flight_) context->TryCancel();
}

void JobRunner::RequestStop() {
  absl::MutexLock lock(&mutex_);
  stop_.store(true);
  stopping_.store(true);
  for (auto& [context, worker] : in_flight_) context->TryCancel();
}

void JobRunner::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

v1::Job JobRunner::Snapshot() const {
  absl::MutexLock lock(&mutex_);
  return job_;
}

bool JobRunner::terminal() const {
  absl::MutexLock lock(&mutex_);
  return IsTerminal(job_.state());
}

absl::Status JobRunner::PersistOrFail() {
  v1::Job copy = Snapshot();
  absl::Status stored = deps_.store->PutJob(copy);
  if (!stored.ok()) base::LogError(copy.job_id(), ": could not store the job: ", stored.message());
  return stored;
}

void JobRunner::Persist() { (void)PersistOrFail(); }

void JobRunner::Emit(v1::JobEvent event) {
  {
    absl::MutexLock lock(&mutex_);
    event.set_sequence(next_sequence_++);
    event.set_job_id(job_.job_id());
    *event.mutable_time() = Now();
  }
  if (absl::Status stored = deps_.store->AppendEvent(event); !stored.ok()) {
    base::LogError(event.job_id(), ": could not store an event: ", stored.message());
  }
  deps_.signal->Notify();
}

void JobRunner::SetState(v1::JobState state, const std::string& reason) {
  v1::JobEvent event;
  {
    absl::MutexLock lock(&mutex_);
    const v1::JobState previous = job_.state();
    if (previous == state && job_.state_reason() == reason) return;
    job_.set_state(state);
    job_.set_state_reason(reason);
    *job_.mutable_state_changed_at() = Now();
    if (state == v1::JOB_STATE_RUNNING && !job_.has_started_at()) *job_.mutable_started_at() = Now();
    if (IsTerminal(state)) *job_.mutable_finished_at() = Now();
    if (previous == state) {
      // Only the reason changed: stored, not an event.
      state = v1::JOB_STATE_UNSPECIFIED;
    } else {
      event.mutable_state_changed()->set_previous(previous);
      event.mutable_state_changed()->set_state(state);
      event.mutable_state_changed()->set_reason(reason);
    }
  }
  Persist();
  if (event.has_state_changed()) {
    base::LogInfo(job_.job_id(), ": ", v1::JobState_Name(event.state_changed().state()), " — ", reason);
    Emit(std::move(event));
  } else {
    deps_.signal->Notify();
  }
}

void JobRunner::SetReason(const std::string& reason) {
  v1::JobState state;
  {
    absl::MutexLock lock(&mutex_);
    state = job_.state();
  }
  SetState(state, reason);
}

void JobRunner::Run() {
  absl::Status status;
  try {
    status = RunJob();
  } catch (const std::exception& e) {
    // A bug or an allocation failure must fail this job, not end the coordinator (which would
    // then crash again on resuming it).
    status = absl::InternalError(absl::StrCat("coordinator error: ", e.what()));
  }
  if (stop_.load() && !cancel_.load() && !status.ok()) return;  // shutdown: resumes at the next start
  if (status.ok()) {
    SetState(v1::JOB_STATE_SUCCEEDED, absl::StrCat("all ", job_.spec().rounds(), " rounds done"));
  } else if (cancel_.load()) {
    std::string reason;
    {
      absl::MutexLock lock(&mutex_);
      reason = cancel_reason_;
    }
    SetState(v1::JOB_STATE_CANCELLED, reason.empty() ? "cancelled by client" : absl::StrCat("cancelled by client: ", reason));
  } else {
    SetState(v1::JOB_STATE_FAILED, std::string(status.message()));
  }
  deps_.registry->ClearJob(job_.job_id());
  deps_.registry->AddFinishedJob(job_.job_id());
  // A finished job keeps only its record: parameters, optimizer state and data are released.
  trainer_.reset();
  absl::MutexLock lock(&mutex_);
  published_.reset();
}

absl::Status JobRunner::RunJob() {
  const v1::JobSpec spec = Snapshot().spec();
  const int64_t rounds = spec.rounds();
  bool fresh = false;
  {
    absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = deps_.store->Checkpoints(job_.job_id());
    if (!checkpoints.ok()) return checkpoints.status();
    fresh = checkpoints->empty();
  }
  if (fresh) {
    if (absl::Status written = WriteCheckpoint(0); !written.ok()) return written;
  }
  const bool evaluate = data_.held_out_sequences() > 0;
  const int64_t eval_interval = spec.eval_interval_rounds();
  const int64_t checkpoint_interval = spec.has_checkpoint_interval_rounds() ? spec.checkpoint_interval_rounds() : 10;

  int64_t completed = Snapshot().progress().rounds_completed();
  if (evaluate && completed == 0 && !Snapshot().progress().has_eval_round()) {
    if (absl::Status evaluated = Evaluate(0); !evaluated.ok()) return evaluated;
  }
  for (int64_t round = completed + 1; round <= rounds; ++round) {
    if (stopping()) return absl::CancelledError("stopped");
    const absl::Time started = absl::Now();
    const std::vector<SequenceRef> sequences = data_.RoundSequences(round);
    absl::StatusOr<RoundOutput> output = RunShards(round, sequences, /*evaluate_only=*/false);
    if (!output.ok()) return output.status();
    std::vector<at::Tensor> gradient;
    for (size_t i = 0; i < output->gradient.size(); ++i) {
      gradient.push_back(output->gradient[i].to(performer::ToScalarType(dtype_)));
    }
    absl::StatusOr<StepResult> step = trainer_->Step(gradient);
    if (!step.ok()) return absl::InternalError(absl::StrCat("round ", round, ": ", step.status().message()));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
    recent_round_seconds_.push_back(seconds);
    if (recent_round_seconds_.size() > 5) recent_round_seconds_.erase(recent_round_seconds_.begin());
    const double mean_seconds =
        std::accumulate(recent_round_seconds_.begin(), recent_round_seconds_.end(), 0.0) / recent_round_seconds_.size();
    const double loss = output->loss_sum / static_cast<double>(std::max<int64_t>(1, output->tokens));

    v1::JobEvent event;
    v1::RoundCompleted* done = event.mutable_round_completed();
    {
      absl::MutexLock lock(&mutex_);
      v1::JobProgress* progress = job_.mutable_progress();
      progress->set_rounds_completed(round);
      progress->set_parameter_version(progress->parameter_version() + 1);
      progress->set_tokens_trained(progress->tokens_trained() + output->tokens);
      progress->set_loss(loss);
      if (config_.vocab == 256) progress->set_bits_per_byte(loss / kLn2);
      progress->set_tokens_per_second(static_cast<double>(output->tokens) / seconds);
      progress->set_eta_seconds(mean_seconds * static_cast<double>(rounds - round));
      progress->set_active_workers(output->workers);
      done->set_round(round);
      done->set_rounds(rounds);
      done->set_parameter_version(progress->parameter_version());
      done->set_loss(loss);
      if (config_.vocab == 256) done->set_bits_per_byte(loss / kLn2);
      done->set_tokens(output->tokens);
      done->set_tokens_per_second(progress->tokens_per_second());
      done->set_round_seconds(seconds);
      done->set_eta_seconds(progress->eta_seconds());
      done->set_learning_rate(step->learning_rate);
      done->set_gradient_norm(step->gradient_norm);
      done->set_workers(output->workers);
      done->set_shards(output->shards);
      done->set_reassigned_shards(output->reassigned);
      job_.set_state_reason(absl::StrFormat("round %d/%d done", round, rounds));
    }
    // The new version is durable before any worker can fetch it.
    if (absl::Status stored = PersistOrFail(); !stored.ok()) return stored;
    Publish();
    Emit(std::move(event));
    base::LogInfo(job_.job_id(), absl::StrFormat(": round %d/%d loss %.4f, %.0f tok/s, |g| %.3g, %d workers", round,
                                                rounds, loss, static_cast<double>(output->tokens) / seconds,
                                                step->gradient_norm, output->workers));
    if (evaluate && (round == rounds || (eval_interval > 0 && round % eval_interval == 0))) {
      if (absl::Status evaluated = Evaluate(round); !evaluated.ok()) return evaluated;
    }
    if (round == rounds || round % checkpoint_interval == 0) {
      if (absl::Status written = WriteCheckpoint(round); !written.ok()) return written;
    }
  }
  return absl::OkStatus();
}

absl::Status JobRunner::Evaluate(int64_t round) {
  absl::StatusOr<RoundOutput> output = RunShards(round, data_.HeldOutSequences(), /*evaluate_only=*/true);
  if (!output.ok()) return output.status();
  const double loss = output->loss_sum / static_cast<double>(std::max<int64_t>(1, output->tokens));
  v1::JobEvent event;
  v1::Evaluation* evaluation = event.mutable_evaluation();
  evaluation->set_round(round);
  evaluation->set_loss(loss);
  evaluation->set_tokens(output->tokens);
  {
    absl::MutexLock lock(&mutex_);
    v1::JobProgress* progress = job_.mutable_progress();
    progress->set_eval_loss(loss);
    progress->set_eval_round(round);
    if (config_.vocab == 256) {
      progress->set_eval_bits_per_byte(loss / kLn2);
      evaluation->set_bits_per_byte(loss / kLn2);
    }
  }
  Persist();
  Emit(std::move(event));
  base::LogInfo(job_.job_id(), absl::StrFormat(": held-out loss after round %d: %.4f (%.4f bits/byte)", round, loss,
                                              loss / kLn2));
  return absl::OkStatus();
}

absl::Status JobRunner::WriteCheckpoint(int64_t round) {
  const std::string base = absl::StrFormat("%s/round-%06d", deps_.job_dir, round);
  const std::string model_path = base + ".safetensors";
  const std::string optimizer_path = base + ".optimizer.safetensors";
  v1::Job job = Snapshot();
  const uint64_t version = job.progress().parameter_version();
  std::map<std::string, std::string> metadata = {
      {"job_id", job.job_id()},
      {"round", absl::StrCat(round)},
      {"parameter_version", absl::StrCat(version)},
      {"tokens_trained", absl::StrCat(job.progress().tokens_trained())},
  };
  if (absl::Status saved = trainer_->Save(model_path, optimizer_path, metadata); !saved.ok()) {
    return absl::InternalError(absl::StrCat("writing the round-", round, " checkpoint: ", saved.message()));
  }
  absl::StatusOr<std::string> sha = base::Sha256OfFile(model_path);
  if (!sha.ok()) return sha.status();
  std::error_code error;
  const int64_t bytes = static_cast<int64_t>(std::filesystem::file_size(model_path, error));
  CheckpointRecord record{job.job_id(), round, version, model_path, optimizer_path, bytes, *sha};
  if (absl::Status stored = deps_.store->PutCheckpoint(record); !stored.ok()) return stored;
  {
    absl::MutexLock lock(&mutex_);
    job_.mutable_progress()->set_checkpoint_round(round);
  }
  Persist();
  v1::JobEvent event;
  v1::CheckpointWritten* written = event.mutable_checkpoint_written();
  written->set_round(round);
  written->set_parameter_version(version);
  written->set_bytes(bytes);
  written->set_sha256(*sha);
  Emit(std::move(event));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRunner::WorkerPlan>> JobRunner::PlanWorkers(int64_t round) {
  const v1::JobSpec spec = Snapshot().spec();
  const int min_workers = spec.has_min_workers() ? spec.min_workers() : 1;
  while (true) {
    if (stopping()) return absl::CancelledError("stopped");
    std::vector<WorkerHandle> live = deps_.registry->LiveWorkers(spec.constraints());
    std::vector<WorkerPlan> plans;
    std::string refusal;
    for (const WorkerHandle& worker : live) {
      const std::string key = WorkerKey(worker);
      if (refused_.count(key) > 0) continue;
      auto cached = plans_.find(key);
      if (cached == plans_.end()) {
        planner::PlanSearchRequest request;
        request.workload.model = config_;
        request.workload.seq_len = data_.sequence_length();
        request.workload.documents = data_.max_documents_per_sequence();
        // Shards of several sequences keep a running gradient sum on the worker.
        request.workload.gradient_sum = data_.sequences_per_round() > 1;
        const double scale = budget_scale_.count(worker.worker_id) ? budget_scale_[worker.worker_id] : 1.0;
        request.memory_budget_bytes = static_cast<int64_t>(static_cast<double>(worker.memory_budget_bytes) * scale);
        request.dtype = dtype_;
        request.safety_margin = deps_.options.safety_margin;
        absl::StatusOr<planner::PlanSearchResult> result = planner::SearchPlans(request, worker.profile);
        if (!result.ok()) {
          refused_.insert(key);
          refusal = absl::StrCat("worker ", worker.worker_id, ": ", result.status().message());
          base::LogWarning(job_.job_id(), ": ", refusal);
          continue;
        }
        cached = plans_.emplace(key, result->chosen).first;
        v1::JobEvent event;
        v1::WorkerPlanChanged* changed = event.mutable_worker_plan_changed();
        changed->set_worker_id(worker.worker_id);
        changed->set_round(round);
        *changed->mutable_plan() = planner::CandidateToProto(result->chosen);
        changed->set_reason(result->reason);
        if (auto replan = replans_.find(worker.worker_id); replan != replans_.end()) {
          *changed->mutable_previous() = planner::PlanToProto(replan->second.first);
          changed->set_reason(absl::StrCat(replan->second.second, "; ", result->reason));
          replans_.erase(replan);
        }
        changed->set_predicted_tokens_per_second(static_cast<double>(data_.sequence_length()) /
                                                 std::max(1e-9, result->chosen.prediction.seconds));
        Emit(std::move(event));
        base::LogInfo(job_.job_id(), ": worker ", worker.worker_id, " plan ", planner::PlanSummary(result->chosen.plan),
                     " (predicted peak ", planner::HumanBytes(result->chosen.prediction.peak_bytes), ")");
      }
      WorkerPlan plan;
      plan.worker = worker;
      plan.candidate = cached->second;
      plan.tokens_per_second =
          static_cast<double>(data_.sequence_length()) / std::max(1e-9, cached->second.prediction.seconds);
      v1::WorkerJobPlan job_plan;
      job_plan.set_job_id(job_.job_id());
      *job_plan.mutable_plan() = planner::CandidateToProto(plan.candidate);
      job_plan.set_predicted_tokens_per_second(plan.tokens_per_second);
      deps_.registry->SetJobPlan(worker.worker_id, job_plan);
      plans.push_back(std::move(plan));
    }
    const bool queued = Snapshot().state() == v1::JOB_STATE_QUEUED;
    if (!plans.empty() && static_cast<int>(plans.size()) >= min_workers) {
      if (queued) SetState(v1::JOB_STATE_RUNNING, absl::StrCat("running on ", plans.size(), " workers"));
      return plans;
    }
    if (plans.empty() && !live.empty() && refused_.size() >= live.size() && !refusal.empty()) {
      bool all_refused = true;
      for (const WorkerHandle& worker : live) all_refused &= refused_.count(WorkerKey(worker)) > 0;
      if (all_refused && !queued) {
        return absl::ResourceExhaustedError(
            absl::StrCat("round ", round, ": every eligible worker refused the plan; ", refusal));
      }
    }
    SetReason(absl::StrCat("waiting for ", min_workers, " eligible worker", min_workers == 1 ? "" : "s", " (",
                           plans.size(), " live)"));
    deps_.signal->WaitAfter(deps_.signal->count(), absl::Milliseconds(250));
  }
}

absl::StatusOr<JobRunner::RoundOutput> JobRunner::RunShards(int64_t round, const std::vector<SequenceRef>& sequences,
                                                            bool evaluate_only) {
  const uint64_t version = Snapshot().progress().parameter_version();
  const int64_t normalizer = std::max<int64_t>(1, data_.PredictedTokens(sequences));
  const std::string what = evaluate_only ? absl::StrCat("evaluation after round ", round) : absl::StrCat("round ", round);

  absl::StatusOr<std::vector<WorkerPlan>> plans = PlanWorkers(round);
  if (!plans.ok()) return plans.status();

  // Shards: each worker's speed-proportional share, cut to fit one request.
  std::vector<double> speeds;
  for (const WorkerPlan& plan : *plans) speeds.push_back(plan.tokens_per_second);
  const std::vector<int64_t> counts = SplitBySpeed(static_cast<int64_t>(sequences.size()), speeds);
  const int64_t per_shard = MaxSequencesPerShard(data_.sequence_length(), rpc::TokenWidth(encoding_));
  std::vector<Shard> shards;
  size_t next = 0;
  for (size_t w = 0; w < plans->size(); ++w) {
    for (int64_t left = counts[w]; left > 0;) {
      // At most per_shard sequences (bytes) and LIMIT_MAX_SHARD_DOC_STARTS document starts.
      int64_t take = 0;
      int64_t documents = 0;
      while (take < std::min(left, per_shard)) {
        const int64_t more = data_.DocumentsIn(sequences[next + take]);
        if (take > 0 && documents + more > v1::LIMIT_MAX_SHARD_DOC_STARTS) break;
        documents += more;
        ++take;
      }
      Shard shard;
      shard.id = static_cast<int64_t>(shards.size());
      shard.sequences.assign(sequences.begin() + next, sequences.begin() + next + take);
      shard.expected_tokens = data_.PredictedTokens(shard.sequences);
      shard.worker = w;
      shards.push_back(std::move(shard));
      next += take;
      left -= take;
    }
  }
  std::vector<int64_t> expected;
  for (const Shard& shard : shards) expected.push_back(shard.expected_tokens);
  GradientAggregator aggregator(round, version, expected, evaluate_only ? std::vector<std::vector<int64_t>>{} : shapes_,
                                evaluate_only);
  RoundOutput output;
  output.shards = static_cast<int>(shards.size());
  std::set<std::string> contributors;
  std::set<int64_t> reassigned_shards;

  std::vector<Shard> pending = std::move(shards);
  std::vector<WorkerPlan> wave_plans = *std::move(plans);
  while (!pending.empty()) {
    if (stopping()) return absl::CancelledError("stopped");
    // One thread per worker with shards in this wave; each runs its shards in order.
    std::vector<std::vector<size_t>> by_worker(wave_plans.size());
    for (size_t i = 0; i < pending.size(); ++i) by_worker[pending[i].worker].push_back(i);
    std::vector<absl::Status> results(pending.size());
    std::vector<int64_t> peaks(pending.size(), 0);
    std::vector<std::thread> threads;
    std::atomic<int> running{0};
    for (size_t w = 0; w < wave_plans.size(); ++w) {
      if (by_worker[w].empty()) continue;
      ++running;
      threads.emplace_back([&, w] {
        struct Done {
          std::atomic<int>* running;
          ~Done() { --*running; }
        } done{&running};
        const WorkerHandle& worker = wave_plans[w].worker;
        std::shared_ptr<void> lease = deps_.leases->Acquire(worker.worker_id, &stopping_);
        for (size_t i : by_worker[w]) {
          if (lease == nullptr || stopping()) {
            results[i] = absl::CancelledError("stopped");
          } else if (!deps_.registry->IsServing(worker.worker_id, worker.incarnation)) {
            results[i] = absl::UnavailableError(absl::StrCat("worker ", worker.worker_id, " is gone"));
          } else {
            results[i] = CallShard(wave_plans[w], pending[i], round, version, normalizer, evaluate_only,
                                   &aggregator, &peaks[i]);
          }
        }
      });
    }
    // While the wave runs, a worker that stops heartbeating (LOST) has its call cancelled at once
    // rather than at the shard's deadline.
    while (running.load() > 0) {
      CancelCallsToGoneWorkers();
      deps_.signal->WaitAfter(deps_.signal->count(), absl::Milliseconds(200));
    }
    for (std::thread& thread : threads) thread.join();
    if (stopping()) return absl::CancelledError("stopped");

    std::vector<Shard> failed;
    std::set<std::string> failed_workers;
    for (size_t i = 0; i < pending.size(); ++i) {
      const WorkerPlan& plan = wave_plans[pending[i].worker];
      const bool ok = results[i].ok() || results[i].code() == absl::StatusCode::kAlreadyExists;
      deps_.registry->RecordShard(plan.worker.worker_id, ok, peaks[i]);
      if (ok) {
        contributors.insert(plan.worker.worker_id);
        if (!evaluate_only) MaybeReplan(plan, peaks[i], round + 1);
        continue;
      }
      Shard shard = pending[i];
      shard.last_error = std::string(results[i].message());
      if (results[i].code() == absl::StatusCode::kResourceExhausted) refused_.insert(WorkerKey(plan.worker));
      failed_workers.insert(plan.worker.worker_id);
      // A busy, draining or unreachable worker (UNAVAILABLE) says nothing about the shard: only other
      // failures count against max_attempts. A dead worker stops being offered work once it is LOST.
      if (results[i].code() != absl::StatusCode::kUnavailable) ++shard.failures;
      if (shard.failures >= deps_.options.max_attempts) {
        return absl::UnavailableError(absl::StrCat(what, ": shard ", shard.id, " failed ", shard.failures,
                                                   " times; last: ", shard.last_error));
      }
      ++shard.attempt;
      failed.push_back(std::move(shard));
    }
    if (failed.empty()) break;

    // Reassign: prefer live workers that did not just fail.
    absl::StatusOr<std::vector<WorkerPlan>> replanned = PlanWorkers(round);
    if (!replanned.ok()) return replanned.status();
    std::vector<size_t> preferred;
    for (size_t w = 0; w < replanned->size(); ++w) {
      if (failed_workers.count((*replanned)[w].worker.worker_id) == 0) preferred.push_back(w);
    }
    if (preferred.empty()) {
      for (size_t w = 0; w < replanned->size(); ++w) preferred.push_back(w);
      deps_.signal->WaitAfter(deps_.signal->count(), absl::Milliseconds(500));  // back off before retrying
    }
    for (size_t k = 0; k < failed.size(); ++k) {
      Shard& shard = failed[k];
      const std::string from = wave_plans[shard.worker].worker.worker_id;
      shard.worker = preferred[k % preferred.size()];
      reassigned_shards.insert(shard.id);
      v1::JobEvent event;
      v1::ShardReassigned* moved = event.mutable_shard_reassigned();
      moved->set_round(round);
      moved->set_shard_id(shard.id);
      moved->set_from_worker_id(from);
      moved->set_reason(shard.last_error);
      moved->set_next_attempt(shard.attempt);
      Emit(std::move(event));
      base::LogWarning(job_.job_id(), ": ", what, " shard ", shard.id, " on ", from, " failed (", shard.last_error,
                      "); attempt ", shard.attempt, " on ", (*replanned)[shard.worker].worker.worker_id);
    }
    pending = std::move(failed);
    wave_plans = *std::move(replanned);
  }
  if (!aggregator.complete()) return absl::InternalError(absl::StrCat(what, ": aggregation incomplete"));
  output.loss_sum = aggregator.loss_sum();
  output.tokens = aggregator.token_count();
  if (!evaluate_only) output.gradient = aggregator.gradient();
  output.workers = static_cast<int>(contributors.size());
  output.reassigned = static_cast<int>(reassigned_shards.size());
  return output;
}

absl::Status JobRunner::CallShard(const WorkerPlan& plan, const Shard& shard, int64_t round, uint64_t version,
                                  int64_t normalizer, bool evaluate_only, GradientAggregator* aggregator,
                                  int64_t* measured_peak) {
  v1::ComputeGradientRequest request;
  request.set_job_id(job_.job_id());
  request.set_round(round);
  request.set_shard_id(shard.id);
  request.set_attempt(shard.attempt);
  request.set_parameter_version(version);
  *request.mutable_plan() = planner::PlanToProto(plan.candidate.plan);
  request.set_sequence_length(data_.sequence_length());
  request.set_token_encoding(encoding_);
  std::vector<int64_t> tokens, doc_starts;
  data_.Gather(shard.sequences, &tokens, &doc_starts);
  absl::StatusOr<std::string> encoded = rpc::EncodeTokens(tokens, encoding_);
  if (!encoded.ok()) return encoded.status();
  request.set_tokens(*std::move(encoded));
  for (int64_t start : doc_starts) request.add_doc_starts(start);
  request.set_loss_normalizer(normalizer);
  request.set_feature_seed(job_.spec().seed());
  request.set_evaluate_only(evaluate_only);

  const double predicted = plan.candidate.prediction.seconds * static_cast<double>(shard.sequences.size());
  auto context = rpc::MakeClientContext(
      deps_.worker_token,
      std::chrono::milliseconds(absl::ToInt64Milliseconds(deps_.options.shard_timeout + absl::Seconds(10 * predicted))));
  {
    absl::MutexLock lock(&mutex_);
    in_flight_[context.get()] = {plan.worker.worker_id, plan.worker.incarnation};
    if (stop_.load() || cancel_.load()) context->TryCancel();
  }
  struct Untrack {
    JobRunner* runner;
    grpc::ClientContext* context;
    ~Untrack() {
      absl::MutexLock lock(&runner->mutex_);
      runner->in_flight_.erase(context);
      runner->cancelled_gone_.erase(context);
    }
  } untrack{this, context.get()};

  std::vector<performer::TensorSpec> specs;
  for (size_t i = 0; i < shapes_.size(); ++i) specs.push_back({trainer_->names()[i], shapes_[i]});
  performer::TensorAssembler assembler(std::move(specs), dtype_,
                                       absl::StrCat("gradient of round ", round, " shard ", shard.id, " from ",
                                                    plan.worker.worker_id));
  std::unique_ptr<grpc::ClientReaderInterface<v1::ComputeGradientResponse>> reader =
      plan.worker.stub->ComputeGradient(context.get(), request);
  v1::ComputeGradientResponse response;
  std::optional<v1::GradientSummary> summary;
  absl::Status stream_error;
  while (reader->Read(&response)) {
    if (!stream_error.ok()) continue;
    if (response.has_chunk()) {
      if (evaluate_only || summary.has_value()) {
        stream_error = absl::InvalidArgumentError("unexpected gradient chunk");
      } else {
        stream_error = assembler.Add(response.chunk());
      }
      if (!stream_error.ok()) context->TryCancel();
    } else if (response.has_summary()) {
      summary = response.summary();
    }
  }
  grpc::Status finished = reader->Finish();
  {
    absl::MutexLock lock(&mutex_);
    if (cancelled_gone_.count(context.get()) > 0) {
      return absl::UnavailableError(absl::StrCat("worker ", plan.worker.worker_id,
                                                 " stopped heartbeating; its call was cancelled"));
    }
  }
  if (!stream_error.ok()) return stream_error;
  if (!finished.ok()) {
    return rpc::FromGrpcStatus(finished, absl::StrCat("worker ", plan.worker.worker_id), context.get());
  }
  if (!summary.has_value()) return absl::InvalidArgumentError("stream ended without a summary");
  if (summary->job_id() != job_.job_id() || summary->shard_id() != shard.id || summary->attempt() != shard.attempt) {
    return absl::InvalidArgumentError("summary does not echo the request");
  }
  *measured_peak = summary->measured_peak_bytes();
  ShardResult result;
  result.summary = *summary;
  if (!evaluate_only) {
    absl::StatusOr<std::vector<at::Tensor>> gradient = assembler.Finish();
    if (!gradient.ok()) return gradient.status();
    result.gradient = *std::move(gradient);
  }
  absl::Status added = aggregator->Add(std::move(result));
  if (added.ok() && !evaluate_only) {
    v1::WorkerJobPlan job_plan;
    job_plan.set_job_id(job_.job_id());
    *job_plan.mutable_plan() = planner::CandidateToProto(plan.candidate);
    job_plan.set_predicted_tokens_per_second(plan.tokens_per_second);
    if (summary->compute_seconds() > 0) {
      job_plan.set_measured_tokens_per_second(
          static_cast<double>(shard.sequences.size() * data_.sequence_length()) / summary->compute_seconds());
    }
    job_plan.set_measured_peak_bytes(summary->measured_peak_bytes());
    deps_.registry->SetJobPlan(plan.worker.worker_id, job_plan);
  }
  return added;
}

void JobRunner::CancelCallsToGoneWorkers() {
  absl::MutexLock lock(&mutex_);
  for (auto& [context, worker] : in_flight_) {
    if (cancelled_gone_.count(context) == 0 && !deps_.registry->IsServing(worker.first, worker.second)) {
      cancelled_gone_.insert(context);
      context->TryCancel();
    }
  }
}

void JobRunner::MaybeReplan(const WorkerPlan& plan, int64_t measured_peak, int64_t round) {
  const int64_t predicted = plan.candidate.prediction.peak_bytes;
  if (measured_peak <= 0 || predicted <= 0) return;
  const double ratio = static_cast<double>(measured_peak) / static_cast<double>(predicted);
  if (ratio <= deps_.options.replan_ratio) return;
  // The planner under-predicted this device: plan again, once per worker and job, against a budget
  // shrunk by the error (repeating would compound one device's constant overhead into a refusal).
  if (budget_scale_.count(plan.worker.worker_id) > 0) return;
  budget_scale_[plan.worker.worker_id] = std::max(0.1, 1.0 / ratio);
  plans_.erase(WorkerKey(plan.worker));
  replans_[plan.worker.worker_id] = {
      plan.candidate.plan, absl::StrCat("measured ", planner::HumanBytes(measured_peak), " vs predicted ",
                                        planner::HumanBytes(predicted), ": replanned")};
  base::LogWarning(job_.job_id(), ": worker ", plan.worker.worker_id, " measured ", planner::HumanBytes(measured_peak),
                  " vs predicted ", planner::HumanBytes(predicted), ": replanning from round ", round);
}

}  // namespace slimfit::server
