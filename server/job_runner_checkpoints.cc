// JobRunner: checkpoints — written in the background while the next round's shards run, recorded
// before that round's step, restored, and forgotten when the job goes back to an earlier round.
#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <future>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/verified_file.h"
#include "performer/model_checkpoint.h"
#include "performer/performer_model.h"
#include "performer/safetensors.h"
#include "server/job_runner.h"

namespace slimfit::server {
namespace {

// Deletes a checkpoint's two files; one already gone is what is wanted.
void RemoveFiles(const CheckpointRecord& checkpoint) {
  std::error_code ignored;
  std::filesystem::remove(checkpoint.model_path, ignored);
  std::filesystem::remove(checkpoint.optimizer_path, ignored);
}

// OK when the checkpoint's files are what was written: the model file's size and SHA-256, and the
// optimizer file's SHA-256 where one was recorded (checkpoints from before it was kept have none).
absl::Status VerifyCheckpoint(const CheckpointRecord& checkpoint) {
  if (absl::Status model = base::VerifyFile(checkpoint.model_path, {checkpoint.bytes, checkpoint.sha256});
      !model.ok()) {
    return model;
  }
  if (checkpoint.optimizer_sha256.empty()) return absl::OkStatus();
  return base::VerifyFile(checkpoint.optimizer_path, {-1, checkpoint.optimizer_sha256});
}

}  // namespace

absl::Status JobRunner::VoidRolledBackCheckpoints(const std::vector<v1::JobEvent>& events) {
  // A checkpoint is void when a rollback to an earlier round was announced after it was written:
  // the coordinator stopped between the announcement and forgetting it.
  std::set<int64_t> written, voided;
  for (const v1::JobEvent& event : events) {
    if (event.has_checkpoint_written()) {
      written.insert(event.checkpoint_written().round());
      voided.erase(event.checkpoint_written().round());
    } else if (event.has_worker_quarantined() && event.worker_quarantined().has_rolled_back_to_round()) {
      for (int64_t round : written) {
        if (round > event.worker_quarantined().rolled_back_to_round()) voided.insert(round);
      }
    }
  }
  if (voided.empty()) return absl::OkStatus();
  return ForgetCheckpointsAfter(*voided.begin() - 1);
}

void JobRunner::RemoveUnrecordedFiles(const std::vector<CheckpointRecord>& recorded) {
  std::set<std::filesystem::path> kept;
  for (const CheckpointRecord& checkpoint : recorded) {
    kept.insert(std::filesystem::path(checkpoint.model_path).lexically_normal());
    kept.insert(std::filesystem::path(checkpoint.optimizer_path).lexically_normal());
  }
  std::error_code error;
  std::vector<std::filesystem::path> unrecorded;
  for (const auto& entry : std::filesystem::directory_iterator(deps_.job_dir, error)) {
    if (entry.is_regular_file(error) && kept.count(entry.path().lexically_normal()) == 0) {
      unrecorded.push_back(entry.path());
    }
  }
  std::vector<std::string> removed;
  for (const std::filesystem::path& path : unrecorded) {
    std::error_code ignored;
    if (std::filesystem::remove(path, ignored)) removed.push_back(path.filename().string());
  }
  if (!removed.empty()) {
    base::LogWarning(record_.job_id(), ": removed ", removed.size(),
                     " file(s) of checkpoints never recorded (the coordinator stopped while writing them): ",
                     absl::StrJoin(removed, ", "));
  }
}

absl::Status JobRunner::ForgetCheckpointsAfter(int64_t round) {
  absl::StatusOr<std::vector<CheckpointRecord>> forgotten =
      deps_.store->DeleteCheckpointsAfter(record_.job_id(), round);
  if (!forgotten.ok()) return forgotten.status();
  for (const CheckpointRecord& checkpoint : *forgotten) RemoveFiles(checkpoint);
  if (!forgotten->empty()) {
    base::LogWarning(record_.job_id(), ": checkpoints of rounds ", forgotten->front().round, " to ",
                     forgotten->back().round, " are void (rolled back to round ", round, ")");
  }
  return absl::OkStatus();
}

absl::Status JobRunner::RestoreFromCheckpoint(const CheckpointRecord& latest) {
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
  const v1::JobSpec spec = record_.Snapshot().spec();
  absl::StatusOr<std::unique_ptr<performer::Trainer>> trainer =
      NewTrainer(std::move(parameters), spec, latest.optimizer_path);
  if (!trainer.ok()) return trainer.status();
  trainer_ = *std::move(trainer);
  int64_t tokens_trained = 0;
  if (auto it = file->metadata.find("tokens_trained"); it != file->metadata.end()) {
    (void)absl::SimpleAtoi(it->second, &tokens_trained);
  }
  uint64_t version = 0;
  record_.Update([&](v1::Job* job) {
    v1::JobProgress* progress = job->mutable_progress();
    progress->set_rounds(spec.rounds());
    // What clients see never goes back (JobProgress.rounds_completed); the rounds after the
    // checkpoint run again, marked as such (RoundCompleted.rerun).
    progress->set_rounds_completed(std::max(progress->rounds_completed(), latest.round));
    progress->set_parameters_round(latest.round);
    progress->set_tokens_trained(tokens_trained);
    progress->set_checkpoint_round(latest.round);
    // Versions are never reused: continue above anything this job published before the restart.
    progress->set_parameter_version(
        std::max<uint64_t>(progress->parameter_version(), latest.parameter_version) + 1);
    version = progress->parameter_version();
  });
  base::LogInfo(record_.job_id(), ": continuing from the round-", latest.round,
                " checkpoint as parameter version ", version);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JobRunner::ResumeFromNewestVerified(const std::vector<CheckpointRecord>& checkpoints,
                                                            int64_t up_to_round,
                                                            v1::JobResumed::Reason reason,
                                                            std::vector<at::Tensor> initial) {
  v1::JobEvent event;
  v1::JobResumed* resumed = event.mutable_resumed();
  resumed->set_reason(reason);
  resumed->set_rounds_completed(record_.Snapshot().progress().rounds_completed());
  const CheckpointRecord* usable = nullptr;
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend() && usable == nullptr; ++it) {
    if (it->round > up_to_round) continue;
    absl::Status verified = VerifyCheckpoint(*it);
    if (verified.ok()) {
      usable = &*it;
    } else if (verified.code() == absl::StatusCode::kDataLoss) {
      base::LogError(record_.job_id(), ": the round-", it->round,
                     " checkpoint is not what was written, passed over: ", verified.message());
      resumed->add_unverifiable_checkpoints(absl::StrCat("round ", it->round, ": ", verified.message()));
    } else {
      return absl::Status(verified.code(),
                          absl::StrCat("reading the round-", it->round, " checkpoint: ", verified.message()));
    }
  }
  const int64_t round = usable != nullptr ? usable->round : 0;
  if (usable == nullptr) {
    // Before anything is forgotten: a job that cannot start over keeps its checkpoints as they are.
    const std::string unverifiable = absl::StrJoin(resumed->unverifiable_checkpoints(), "; ");
    if (initial.empty() && deps_.initial_parameters) {
      absl::StatusOr<std::vector<at::Tensor>> loaded = deps_.initial_parameters();
      if (!loaded.ok()) {
        return absl::DataLossError(
            absl::StrCat("no checkpoint of ", record_.job_id(), " matches what was written (", unverifiable,
                         ") and its initial parameters cannot be loaded: ", loaded.status().message()));
      }
      initial = *std::move(loaded);
    }
    if (initial.empty()) {
      return absl::DataLossError(absl::StrCat("no checkpoint of ", record_.job_id(),
                                              " matches what was written (", unverifiable,
                                              ") and its initial parameters are not at hand"));
    }
  }
  // Checkpoints after the one the job goes on from are void: their rounds run again and write them
  // anew (none left at all: RunJob writes round 0 from the initial parameters first).
  if (absl::Status forgotten = ForgetCheckpointsAfter(usable != nullptr ? round : -1); !forgotten.ok()) {
    return forgotten;
  }
  if (usable != nullptr) {
    if (absl::Status restored = RestoreFromCheckpoint(*usable); !restored.ok()) return restored;
  } else {
    const v1::JobSpec spec = record_.Snapshot().spec();
    absl::StatusOr<std::unique_ptr<performer::Trainer>> trainer = NewTrainer(std::move(initial), spec);
    if (!trainer.ok()) return trainer.status();
    trainer_ = *std::move(trainer);
    record_.Update([&](v1::Job* job) {
      v1::JobProgress* progress = job->mutable_progress();
      progress->set_rounds(spec.rounds());
      progress->set_parameters_round(0);
      progress->set_tokens_trained(0);
      progress->clear_checkpoint_round();
      progress->set_parameter_version(progress->parameter_version() + 1);  // never reused
    });
    resumed->set_initial_parameters(true);
    base::LogWarning(record_.job_id(), ": no checkpoint matches what was written; starting over from the ",
                     "initial parameters");
  }
  resumed->set_round(round);
  if (absl::Status stored = record_.PersistOrFail(); !stored.ok()) return stored;
  record_.Emit(std::move(event));
  return round;
}

absl::StatusOr<int64_t> JobRunner::RollBack(int64_t round) {
  // The WorkerQuarantined event announcing it is stored already: should the coordinator stop in
  // between, VoidRolledBackCheckpoints finishes this at the next start. A checkpoint still being
  // written is of a later round: dropped.
  if (absl::Status awaited = AwaitCheckpoint(/*keep=*/false); !awaited.ok()) return awaited;
  if (absl::Status forgotten = ForgetCheckpointsAfter(round); !forgotten.ok()) return forgotten;
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = deps_.store->Checkpoints(record_.job_id());
  if (!checkpoints.ok()) return checkpoints.status();
  if (checkpoints->empty() || checkpoints->back().round != round) {
    return absl::InternalError(absl::StrCat("rolling back: no checkpoint of round ", round));
  }
  absl::StatusOr<int64_t> resumed =
      ResumeFromNewestVerified(*checkpoints, round, v1::JobResumed::REASON_ROLLBACK, {});
  if (!resumed.ok()) return resumed.status();
  dispatcher_->RolledBack(*resumed);
  if (!record_.Snapshot().progress().has_checkpoint_round()) {
    // Started over from the initial parameters: round 0's checkpoint again, before anything else.
    if (absl::Status written = WriteCheckpoint(0); !written.ok()) return written;
  }
  Publish(/*as_difference=*/false);
  return *resumed;
}

absl::Status JobRunner::WriteCheckpoint(int64_t round) {
  if (absl::Status started = StartCheckpoint(round); !started.ok()) return started;
  return AwaitCheckpoint(/*keep=*/true);
}

absl::Status JobRunner::StartCheckpoint(int64_t round) {
  if (absl::Status awaited = AwaitCheckpoint(/*keep=*/true); !awaited.ok()) return awaited;
  const absl::Time started = absl::Now();
  const std::string prefix = absl::StrFormat("%s/round-%06d", deps_.job_dir, round);
  const v1::Job job = record_.Snapshot();
  CheckpointRecord record{job.job_id(),
                          round,
                          job.progress().parameter_version(),
                          prefix + ".safetensors",
                          prefix + ".optimizer.safetensors",
                          0,
                          "",
                          ""};
  std::map<std::string, std::string> metadata = {
      {"job_id", job.job_id()},
      {"round", absl::StrCat(round)},
      {"parameter_version", absl::StrCat(record.parameter_version)},
      {"tokens_trained", absl::StrCat(job.progress().tokens_trained())},
      {performer::kFeatureSeedKey, absl::StrCat(job.spec().seed())},
  };
  // Handles to the trainer's tensors, no copy: nothing changes them before the next step (or a
  // restore), which awaits this first, and the writer needs no trainer.
  performer::Trainer::Checkpoint contents = trainer_->TakeCheckpoint(metadata);
  pending_checkpoint_ = std::async(
      std::launch::async,
      [contents = std::move(contents), record, started]() mutable -> absl::StatusOr<WrittenCheckpoint> {
        auto failed = [&record](absl::string_view why) {
          RemoveFiles(record);  // nothing half-written stays behind
          return absl::InternalError(absl::StrCat("writing the round-", record.round, " checkpoint: ", why));
        };
        try {
          if (absl::Status saved =
                  performer::Trainer::WriteCheckpoint(contents, record.model_path, record.optimizer_path);
              !saved.ok()) {
            return failed(saved.message());
          }
          contents = performer::Trainer::Checkpoint();  // the tensors' handles go
          absl::StatusOr<std::string> sha = base::Sha256OfFile(record.model_path);
          if (!sha.ok()) return failed(sha.status().message());
          record.sha256 = *std::move(sha);
          absl::StatusOr<std::string> optimizer_sha = base::Sha256OfFile(record.optimizer_path);
          if (!optimizer_sha.ok()) return failed(optimizer_sha.status().message());
          record.optimizer_sha256 = *std::move(optimizer_sha);
          std::error_code error;
          record.bytes = static_cast<int64_t>(std::filesystem::file_size(record.model_path, error));
          return WrittenCheckpoint{std::move(record), absl::ToDoubleSeconds(absl::Now() - started)};
        } catch (const std::exception& e) {
          return failed(e.what());
        }
      });
  return absl::OkStatus();
}

void JobRunner::RecordFinishedCheckpoint() {
  if (!checkpoint_error_.ok() || !pending_checkpoint_.valid() ||
      pending_checkpoint_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return;
  }
  checkpoint_error_ = AwaitCheckpoint(/*keep=*/true);
}

absl::Status JobRunner::AwaitCheckpoint(bool keep) {
  if (!checkpoint_error_.ok()) return checkpoint_error_;
  if (!pending_checkpoint_.valid()) return absl::OkStatus();
  absl::StatusOr<WrittenCheckpoint> written = pending_checkpoint_.get();
  if (!written.ok()) {
    if (keep) return written.status();
    // Of a round the job goes back before: its failure does not matter (nothing of it is left).
    base::LogWarning(record_.job_id(), ": ", written.status().message());
    return absl::OkStatus();
  }
  const CheckpointRecord& record = written->record;
  if (!keep) {
    RemoveFiles(record);
    base::LogWarning(record_.job_id(), ": the round-", record.round,
                     " checkpoint written meanwhile is void (the job goes back to an earlier round)");
    return absl::OkStatus();
  }
  if (absl::Status stored = deps_.store->PutCheckpoint(record); !stored.ok()) return stored;
  record_.Update([&](v1::Job* updated) { updated->mutable_progress()->set_checkpoint_round(record.round); });
  record_.Persist();
  v1::JobEvent event;
  v1::CheckpointWritten* checkpoint = event.mutable_checkpoint_written();
  checkpoint->set_round(record.round);
  checkpoint->set_parameter_version(record.parameter_version);
  checkpoint->set_bytes(record.bytes);
  checkpoint->set_sha256(record.sha256);
  checkpoint->set_seconds(written->seconds);
  record_.Emit(std::move(event));
  return absl::OkStatus();
}

}  // namespace slimfit::server
