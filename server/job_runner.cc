#include "server/job_runner.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "data_formats/token_codec.h"
#include "performer/parameter_selection.h"
#include "performer/performer_model.h"
#include "rpc/rpc_util.h"
#include "server/job_defaults.h"
#include "wire/engine_settings.h"
#include "wire/tensor_codec.h"

namespace slimfit::server {
namespace {

constexpr double kLn2 = 0.69314718055994530942;

}  // namespace

const v1::Optimizer& JobRunner::StepOptimizer(const v1::JobSpec& spec) {
  return spec.has_local_steps() ? spec.outer_optimizer() : spec.optimizer();
}

absl::StatusOr<std::unique_ptr<performer::Trainer>> JobRunner::NewTrainer(
    std::vector<at::Tensor> parameters, const v1::JobSpec& spec, const std::string& optimizer_path) const {
  absl::StatusOr<performer::OptimizerSettings> optimizer = wire::OptimizerSettingsFromProto(
      StepOptimizer(spec), spec.has_local_steps() ? "spec.outer_optimizer" : "spec.optimizer");
  if (!optimizer.ok()) return optimizer.status();
  absl::StatusOr<std::unique_ptr<performer::Trainer>> trainer =
      performer::Trainer::Create(config_, dtype_, std::move(parameters), *optimizer, trainable_);
  if (!trainer.ok()) return trainer.status();
  if (!optimizer_path.empty()) {
    if (absl::Status loaded = (*trainer)->LoadOptimizerState(optimizer_path); !loaded.ok()) return loaded;
  }
  const std::string& directory = deps_.options.offload_directory;
  if (!directory.empty() && StepOptimizer(spec).has_adamw()) {
    if (absl::Status kept = (*trainer)->KeepOptimizerStateIn(directory); !kept.ok()) return kept;
    base::LogInfo(record_.job_id(), ": AdamW's moments are kept in files in ", directory);
  }
  return trainer;
}

absl::StatusOr<std::unique_ptr<JobRunner>> JobRunner::Create(v1::Job job, JobData data,
                                                             performer::ModelConfig config,
                                                             std::vector<at::Tensor> initial,
                                                             RunnerDeps deps) {
  absl::StatusOr<int64_t> last_sequence = deps.store->LastEventSequence(job.job_id());
  if (!last_sequence.ok()) return last_sequence.status();
  std::unique_ptr<JobRunner> runner(
      new JobRunner(std::move(job), *last_sequence + 1, std::move(data), config, std::move(deps)));
  const v1::JobSpec spec = runner->record_.Snapshot().spec();
  runner->dtype_ =
      spec.dtype() == v1::DTYPE_FLOAT64 ? performer::DType::kFloat64 : performer::DType::kFloat32;
  if (!spec.trainable().empty()) {
    absl::StatusOr<std::vector<int>> trainable =
        performer::SelectParameters(performer::ParameterNames(config), spec.trainable());
    if (!trainable.ok()) return trainable.status();
    runner->trainable_ = *std::move(trainable);
  }

  absl::StatusOr<std::vector<v1::JobEvent>> events = runner->deps_.store->Events(runner->record_.job_id(), 0);
  if (!events.ok()) return events.status();
  if (absl::Status voided = runner->VoidRolledBackCheckpoints(*events); !voided.ok()) return voided;
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints =
      runner->deps_.store->Checkpoints(runner->record_.job_id());
  if (!checkpoints.ok()) return checkpoints.status();
  runner->RemoveUnrecordedFiles(*checkpoints);
  if (checkpoints->empty()) {
    absl::StatusOr<std::unique_ptr<performer::Trainer>> trainer =
        runner->NewTrainer(std::move(initial), spec);
    if (!trainer.ok()) return trainer.status();
    runner->trainer_ = *std::move(trainer);
    runner->record_.Update([&](v1::Job* job) {
      v1::JobProgress* progress = job->mutable_progress();
      progress->set_rounds(spec.rounds());
      if (progress->parameter_version() == 0) progress->set_parameter_version(1);
    });
  } else {
    // A restart: from the newest checkpoint whose files are still what was written.
    absl::StatusOr<int64_t> resumed =
        runner->ResumeFromNewestVerified(*checkpoints, checkpoints->back().round,
                                         v1::JobResumed::REASON_COORDINATOR_RESTART, std::move(initial));
    if (!resumed.ok()) return resumed.status();
  }
  runner->record_.Update([&](v1::Job* job) {
    job->set_training_tokens(runner->data_.training_tokens());
    job->set_held_out_tokens(runner->data_.held_out_tokens());
  });

  JobRunner& r = *runner;
  WorkerPlanner::Deps planner_deps;
  planner_deps.record = &r.record_;
  planner_deps.registry = r.deps_.registry;
  planner_deps.signal = r.deps_.signal;
  planner_deps.data = &r.data_;
  planner_deps.config = config;
  planner_deps.dtype = r.dtype_;
  planner_deps.bf16_products = spec.bf16_products();
  planner_deps.options = r.deps_.options;
  planner_deps.stopping = &r.stopping_;
  planner_deps.reserved_bytes = ReservedBytesPerWorker(spec, config);
  planner_deps.while_waiting = [runner = &r] { runner->RecordFinishedCheckpoint(); };
  r.planner_ = std::make_unique<WorkerPlanner>(std::move(planner_deps));

  ShardDispatcher::Deps dispatcher_deps;
  dispatcher_deps.record = &r.record_;
  dispatcher_deps.store = r.deps_.store;
  dispatcher_deps.registry = r.deps_.registry;
  dispatcher_deps.leases = r.deps_.leases;
  dispatcher_deps.signal = r.deps_.signal;
  dispatcher_deps.planner = r.planner_.get();
  dispatcher_deps.data = &r.data_;
  dispatcher_deps.options = r.deps_.options;
  dispatcher_deps.names = r.trainer_->names();
  dispatcher_deps.shapes = performer::ParameterShapes(config);
  dispatcher_deps.gradient_tensors = r.trainable_;
  dispatcher_deps.dtype = r.dtype_;
  dispatcher_deps.bf16_products = spec.bf16_products();
  dispatcher_deps.encoding = rpc::NarrowestTokenEncoding(config.vocab);
  dispatcher_deps.feature_seed = spec.seed();
  dispatcher_deps.while_waiting = [runner = &r] { runner->RecordFinishedCheckpoint(); };
  dispatcher_deps.verify_fraction = spec.verify_fraction();
  dispatcher_deps.local_steps = spec.has_local_steps() ? spec.local_steps() : 0;
  dispatcher_deps.round_time_budget_seconds = spec.round_time_budget_seconds();
  dispatcher_deps.inner_optimizer = spec.optimizer();
  dispatcher_deps.pseudo_gradient_compression = spec.compression().pseudo_gradients();
  dispatcher_deps.quarantine_after =
      spec.has_quarantine_after() ? spec.quarantine_after() : kDefaultQuarantineAfter;
  dispatcher_deps.stopping = &r.stopping_;
  r.dispatcher_ = std::make_unique<ShardDispatcher>(std::move(dispatcher_deps));
  // Quarantines and what spot checks verified outlive a coordinator restart: the events have them.
  r.dispatcher_->Replay(*events);

  runner->Publish(/*as_difference=*/false);
  return runner;
}

JobRunner::JobRunner(v1::Job job, int64_t next_sequence, JobData data, performer::ModelConfig config,
                     RunnerDeps deps)
    : deps_(std::move(deps)),
      data_(std::move(data)),
      config_(config),
      record_(std::move(job), next_sequence, deps_.store, deps_.event_observer) {}

JobRunner::~JobRunner() { Stop(); }

void JobRunner::Publish(bool as_difference) {
  auto snapshot = std::make_shared<ParameterSnapshot>();
  snapshot->config = config_;
  snapshot->dtype = dtype_;
  snapshot->names = trainer_->names();
  const v1::Job job = record_.Snapshot();
  snapshot->feature_seed = job.spec().seed();
  snapshot->version = job.progress().parameter_version();
  const v1::Compression compression = job.spec().compression().parameters();
  const bool difference_wanted = as_difference && performer::IsCompressed(compression);
  // Without compression the published version is the trainer's own memory (no copy): RunRound
  // withdraws it before the optimizer steps in place. A compressed job publishes what workers
  // rebuild, which differs from the trainer's values and so is memory of its own.
  const bool shared = !performer::IsCompressed(compression);
  std::shared_ptr<const ParameterSnapshot> previous;
  std::vector<at::Tensor> reusable;
  {
    absl::MutexLock lock(&mutex_);
    if (difference_wanted) {
      previous = published_;
    } else {
      // The previous version is obsolete once the optimizer stepped (no shard of it is running):
      // the new one is copied into its memory when no fetch still reads it, and in any case the
      // coordinator never holds both. A fetch in this moment is told to retry (Parameters).
      std::shared_ptr<const ParameterSnapshot> obsolete = std::move(published_);
      publishing_ = true;
      if (!shared && obsolete != nullptr && obsolete.use_count() == 1 && obsolete->difference.empty() &&
          !obsolete->shares_trainer_memory) {
        std::atomic_thread_fence(std::memory_order_acquire);  // as in WithdrawSharedVersion
        reusable = obsolete->tensors;
      }
    }
  }
  bool published_difference = false;
  if (difference_wanted && previous != nullptr) {
    absl::Status encoded = PublishDifference(*previous, compression, snapshot.get());
    published_difference = encoded.ok();
    if (!encoded.ok()) {
      base::LogWarning(record_.job_id(), ": publishing version ", snapshot->version,
                       " exactly instead of as a difference: ", encoded.message());
    }
  }
  if (!published_difference) {
    snapshot->tensors.clear();
    snapshot->difference.clear();
    snapshot->base_version = 0;
    snapshot->sha256.clear();
    const std::vector<at::Tensor>& parameters = trainer_->parameters();
    bool reuse = reusable.size() == parameters.size();
    for (size_t i = 0; reuse && i < parameters.size(); ++i) {
      reuse = reusable[i].sizes().equals(parameters[i].sizes()) &&
              reusable[i].scalar_type() == parameters[i].scalar_type() && reusable[i].is_contiguous();
    }
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (shared) {
        snapshot->tensors.push_back(parameters[i].detach());
      } else {
        snapshot->tensors.push_back(reuse ? reusable[i].copy_(parameters[i].detach())
                                          : parameters[i].detach().clone());
      }
    }
    snapshot->shares_trainer_memory = shared;
    reusable.clear();
    if (!trainable_.empty()) {
      // Workers holding an earlier version fetch only the trainable tensors, and check the whole.
      absl::StatusOr<std::string> digest = performer::TensorsSha256(snapshot->tensors);
      if (digest.ok()) {
        snapshot->sent_tensors = trainable_;
        snapshot->sha256 = *std::move(digest);
      } else {
        base::LogWarning(record_.job_id(), ": version ", snapshot->version,
                         " goes out whole: ", digest.status().message());
      }
    }
  }
  absl::MutexLock lock(&mutex_);
  published_ = std::move(snapshot);
  publishing_ = false;
}

absl::Status JobRunner::WithdrawSharedVersion() {
  std::shared_ptr<const ParameterSnapshot> obsolete;
  {
    absl::MutexLock lock(&mutex_);
    if (published_ == nullptr || !published_->shares_trainer_memory) return absl::OkStatus();
    // From here until Publish, a fetch is told to retry (Parameters); none can start reading.
    obsolete = std::move(published_);
    publishing_ = true;
  }
  // A fetch still streaming the version (a worker whose shard the round went on without) keeps
  // its memory; the trainer steps on a copy. Otherwise the step writes where the version was.
  if (obsolete.use_count() == 1) {
    // use_count is a relaxed load: order the last fetch's reads (before its release of the
    // pointer) before the optimizer's writes.
    std::atomic_thread_fence(std::memory_order_acquire);
    return absl::OkStatus();
  }
  base::LogInfo(record_.job_id(), ": version ", obsolete->version,
                " is still being fetched; the optimizer steps on a copy of the parameters");
  return trainer_->SeparateParameters();
}

absl::Status JobRunner::PublishDifference(const ParameterSnapshot& previous, v1::Compression compression,
                                          ParameterSnapshot* snapshot) const {
  // The new version is defined as previous + decoded(encode(trainer − previous)): what every worker
  // holding `previous` rebuilds bit for bit. What the encoding loses stays in trainer − published
  // and goes into the next difference.
  absl::StatusOr<performer::EncodedDifference> difference =
      performer::EncodeDifference(previous.tensors, trainer_->parameters(), compression);
  if (!difference.ok()) return difference.status();
  snapshot->compression = compression;
  snapshot->base_version = previous.version;
  snapshot->tensors = std::move(difference->rebuilt);
  snapshot->difference = std::move(difference->encoded);
  snapshot->sha256 = std::move(difference->sha256);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> JobRunner::Parameters(uint64_t version) const {
  const v1::JobState state = record_.state();
  if (IsTerminal(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", record_.job_id(), " is ", v1::JobState_Name(state)));
  }
  absl::MutexLock lock(&mutex_);
  if (published_ == nullptr && publishing_) {
    return absl::UnavailableError(
        absl::StrCat("job ", record_.job_id(), " is publishing its next parameter version; retry"));
  }
  if (published_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("job ", record_.job_id(), " has finished"));
  }
  const uint64_t current = published_->version;
  if (version < current) {
    v1::ErrorDetail detail;
    detail.set_current_parameter_version(current);
    return rpc::AttachErrorDetail(
        absl::AbortedError(absl::StrCat("parameter version ", version, " of ", record_.job_id(),
                                        " is stale; the current version is ", current)),
        detail);
  }
  if (version > current) {
    return absl::NotFoundError(absl::StrCat("parameter version ", version, " of ", record_.job_id(),
                                            " was never published (current ", current, ")"));
  }
  return published_;
}

void JobRunner::Start() {
  thread_ = base::Thread(absl::StrCat("job ", record_.job_id()), [this] {
    Run();
    return absl::OkStatus();
  });
}

void JobRunner::Cancel(const std::string& reason) {
  if (record_.terminal()) return;
  {
    absl::MutexLock lock(&mutex_);
    cancel_reason_ = reason;
  }
  // Set before cancelling, so a call registering after this sees it (the dispatcher checks under
  // its lock).
  cancel_.store(true);
  stopping_.store(true);
  if (dispatcher_ != nullptr) dispatcher_->CancelAll();
}

void JobRunner::RequestStop() {
  stop_.store(true);
  stopping_.store(true);
  if (dispatcher_ != nullptr) dispatcher_->CancelAll();
}

void JobRunner::Stop() {
  RequestStop();
  // Run turns the job's exceptions into its failure; one escaping even that is logged here.
  if (!thread_.joinable()) return;
  if (absl::Status ended = thread_.Join(); !ended.ok()) {
    base::LogError(record_.job_id(), ": ", ended.message());
  }
}

v1::Job JobRunner::Snapshot() const { return record_.Snapshot(); }

bool JobRunner::terminal() const { return record_.terminal(); }

void JobRunner::Run() {
  // A bug or an allocation failure must fail this job, not end the coordinator (which would
  // then crash again on resuming it).
  absl::Status status = base::CatchExceptions("coordinator error", [this] { return RunJob(); });
  // A checkpoint still being written when the job ends, fails or stops holds a completed round:
  // it is finished and recorded (a stopped coordinator resumes from it).
  const absl::Status checkpointed =
      base::CatchExceptions("recording a checkpoint", [this] { return AwaitCheckpoint(/*keep=*/true); });
  if (status.ok()) {
    status = checkpointed;
  } else if (!checkpointed.ok()) {
    base::LogWarning(record_.job_id(), ": ", checkpointed.message());
  }
  if (stop_.load() && !cancel_.load() && !status.ok()) return;  // shutdown: resumes at the next start
  if (status.ok()) {
    record_.SetState(v1::JOB_STATE_SUCCEEDED,
                     absl::StrCat("all ", record_.Snapshot().spec().rounds(), " rounds done"));
  } else if (cancel_.load()) {
    std::string reason;
    {
      absl::MutexLock lock(&mutex_);
      reason = cancel_reason_;
    }
    record_.SetState(v1::JOB_STATE_CANCELLED,
                     reason.empty() ? "cancelled by client" : absl::StrCat("cancelled by client: ", reason));
  } else {
    record_.SetState(v1::JOB_STATE_FAILED, std::string(status.message()));
  }
  deps_.registry->ClearJob(record_.job_id());
  deps_.registry->AddFinishedJob(record_.job_id());
  // A finished job keeps only its record: parameters, optimizer state and data are released.
  trainer_.reset();
  absl::MutexLock lock(&mutex_);
  published_.reset();
}

absl::Status JobRunner::RunJob() {
  const v1::JobSpec spec = record_.Snapshot().spec();
  const int64_t rounds = spec.rounds();
  {
    absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = deps_.store->Checkpoints(record_.job_id());
    if (!checkpoints.ok()) return checkpoints.status();
    if (checkpoints->empty()) {
      if (absl::Status written = WriteCheckpoint(0); !written.ok()) return written;
    }
  }
  const bool evaluate = data_.held_out_sequences() > 0;
  const int64_t eval_interval = spec.eval_interval_rounds();
  const int64_t checkpoint_interval =
      spec.has_checkpoint_interval_rounds() ? spec.checkpoint_interval_rounds() : 10;

  const v1::JobProgress progress = record_.Snapshot().progress();
  if (evaluate && progress.parameters_round() == 0 && !progress.has_eval_round()) {
    if (absl::Status evaluated = Evaluate(0); !evaluated.ok()) return evaluated;
  }
  for (int64_t round = progress.parameters_round() + 1; round <= rounds; ++round) {
    if (stopping()) return absl::CancelledError("stopped");
    absl::StatusOr<int64_t> next = RunRound(round, rounds);
    if (!next.ok()) return next.status();
    if (*next != round + 1) {  // rolled back
      round = *next - 1;
      continue;
    }
    // The checkpoint is written while the evaluation and the next round's shards run; the next
    // step (or the job's end) awaits it and records it.
    if (round == rounds || round % checkpoint_interval == 0) {
      if (absl::Status started = StartCheckpoint(round); !started.ok()) return started;
    }
    if (evaluate && (round == rounds || (eval_interval > 0 && round % eval_interval == 0))) {
      if (absl::Status evaluated = Evaluate(round); !evaluated.ok()) return evaluated;
    }
    if (!checkpoint_error_.ok()) return checkpoint_error_;  // recording one during the evaluation
  }
  return AwaitCheckpoint(/*keep=*/true);
}

absl::StatusOr<int64_t> JobRunner::RunRound(int64_t round, int64_t rounds) {
  const absl::Time started = absl::Now();
  const uint64_t version = record_.Snapshot().progress().parameter_version();
  // A local-steps round is local_steps consecutive batches of the stream, one per inner step.
  const v1::JobSpec spec = record_.Snapshot().spec();
  std::vector<SequenceRef> sequences;
  std::vector<int64_t> steps;
  if (spec.has_local_steps()) {
    const int64_t inner = spec.local_steps();
    for (int64_t h = 0; h < inner; ++h) {
      std::vector<SequenceRef> batch = data_.RoundSequences((round - 1) * inner + h + 1);
      steps.push_back(static_cast<int64_t>(batch.size()));
      sequences.insert(sequences.end(), batch.begin(), batch.end());
    }
  } else {
    sequences = data_.RoundSequences(round);
  }
  absl::StatusOr<RoundOutput> output =
      dispatcher_->Run(round, version, sequences, /*evaluate_only=*/false, steps);
  if (!output.ok()) return output.status();
  // The previous round's checkpoint, written while these shards ran (and recorded as soon as it
  // was done, RecordFinishedCheckpoint), is recorded now at the latest: before the step changes
  // what it holds. RollBack drops it instead: it is of a round the job goes back before. Either
  // reports an error RecordFinishedCheckpoint met meanwhile.
  if (!output->rolled_back_to.has_value()) {
    const absl::Time waiting = absl::Now();
    if (absl::Status awaited = AwaitCheckpoint(/*keep=*/true); !awaited.ok()) return awaited;
    output->timing.set_checkpoint_seconds(absl::ToDoubleSeconds(absl::Now() - waiting));
  }
  if (output->rolled_back_to.has_value()) {
    absl::StatusOr<int64_t> back = RollBack(*output->rolled_back_to);
    if (!back.ok()) return back.status();
    return *back + 1;
  }
  const absl::Time step_started = absl::Now();
  // The round's version was served to its workers by now (its shards are done); a fetch still
  // streaming it (a dropped shard's) adds its bytes when it ends, after this count.
  int64_t bytes_to_workers = 0;
  {
    absl::MutexLock lock(&mutex_);
    if (published_ != nullptr) bytes_to_workers = published_->bytes_served.load();
  }
  if (absl::Status withdrawn = WithdrawSharedVersion(); !withdrawn.ok()) {
    return absl::InternalError(absl::StrCat("round ", round, ": ", withdrawn.message()));
  }
  // The sum (in the parameters' dtype) is the step's gradient as it is, then goes back to the
  // dispatcher to sum the next round.
  absl::StatusOr<performer::StepResult> step = trainer_->Step(output->gradient);
  dispatcher_->Recycle(std::move(output->gradient));
  if (!step.ok()) return absl::InternalError(absl::StrCat("round ", round, ": ", step.status().message()));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
  recent_round_seconds_.push_back(seconds);
  if (recent_round_seconds_.size() > 5) recent_round_seconds_.erase(recent_round_seconds_.begin());
  const double mean_seconds =
      std::accumulate(recent_round_seconds_.begin(), recent_round_seconds_.end(), 0.0) /
      static_cast<double>(recent_round_seconds_.size());
  const double loss = output->loss_sum / static_cast<double>(std::max<int64_t>(1, output->tokens));

  v1::JobEvent event;
  v1::RoundCompleted* done = event.mutable_round_completed();
  record_.Update([&](v1::Job* job) {
    v1::JobProgress* progress = job->mutable_progress();
    // A round completed before a resume went back past it runs again: marked, and what clients
    // see of progress stays where it was (JobProgress.rounds_completed never decreases).
    done->set_rerun(round <= progress->rounds_completed());
    progress->set_rounds_completed(std::max(progress->rounds_completed(), round));
    progress->set_parameters_round(round);
    progress->set_parameter_version(progress->parameter_version() + 1);
    progress->set_tokens_trained(progress->tokens_trained() + output->tokens);
    progress->set_loss(loss);
    if (config_.vocab == 256) progress->set_bits_per_byte(loss / kLn2);
    progress->set_tokens_per_second(static_cast<double>(output->tokens) / seconds);
    progress->set_eta_seconds(mean_seconds * static_cast<double>(rounds - round));
    progress->set_active_workers(output->workers);
    progress->set_bytes_to_workers(progress->bytes_to_workers() + bytes_to_workers);
    progress->set_bytes_from_workers(progress->bytes_from_workers() + output->timing.bytes_from_workers());
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
    done->set_recomputations(output->recomputations);
    done->set_streamed_shards(output->streamed_shards);
    done->set_verified_shards(output->verified);
    for (const std::string& worker : output->unverified_workers) done->add_unverified_workers(worker);
    done->set_inner_steps(output->inner_steps);
    for (const std::string& worker : output->late_workers) done->add_late_workers(worker);
    *done->mutable_timing() = output->timing;
    done->mutable_timing()->set_bytes_to_workers(bytes_to_workers);
    job->set_state_reason(absl::StrFormat("round %d/%d done", round, rounds));
  });
  // The new version is durable before any worker can fetch it.
  if (absl::Status stored = record_.PersistOrFail(); !stored.ok()) return stored;
  Publish(/*as_difference=*/true);
  done->mutable_timing()->set_step_seconds(absl::ToDoubleSeconds(absl::Now() - step_started));
  record_.Emit(std::move(event));
  base::LogInfo(
      record_.job_id(),
      absl::StrFormat(": round %d/%d loss %.4f, %.0f tok/s, |g| %.3g, %d workers", round, rounds, loss,
                      static_cast<double>(output->tokens) / seconds, step->gradient_norm, output->workers));
  return round + 1;
}

absl::Status JobRunner::Evaluate(int64_t round) {
  const uint64_t version = record_.Snapshot().progress().parameter_version();
  absl::StatusOr<RoundOutput> output =
      dispatcher_->Run(round, version, data_.HeldOutSequences(), /*evaluate_only=*/true);
  if (!output.ok()) return output.status();
  const double loss = output->loss_sum / static_cast<double>(std::max<int64_t>(1, output->tokens));
  v1::JobEvent event;
  v1::Evaluation* evaluation = event.mutable_evaluation();
  evaluation->set_round(round);
  evaluation->set_loss(loss);
  evaluation->set_tokens(output->tokens);
  record_.Update([&](v1::Job* job) {
    v1::JobProgress* progress = job->mutable_progress();
    progress->set_eval_loss(loss);
    progress->set_eval_round(round);
    if (config_.vocab == 256) {
      progress->set_eval_bits_per_byte(loss / kLn2);
      evaluation->set_bits_per_byte(loss / kLn2);
    }
  });
  record_.Persist();
  record_.Emit(std::move(event));
  base::LogInfo(record_.job_id(), absl::StrFormat(": held-out loss after round %d: %.4f (%.4f bits/byte)",
                                                  round, loss, loss / kLn2));
  return absl::OkStatus();
}

}  // namespace slimfit::server
