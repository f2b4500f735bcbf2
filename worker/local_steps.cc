#include "worker/local_steps.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "performer/safetensors.h"
#include "wire/engine_settings.h"

namespace slimfit::worker {
namespace {

// Job ids become file names: letters, digits, '-', '_' and '.', not starting with '.'.
bool IsSafeFileName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string LocalStepsTrainer::StatePath(const std::string& job_id) const {
  return absl::StrCat(dir_, "/", job_id, ".safetensors");
}

std::string LocalStepsTrainer::FeedbackPath(const std::string& job_id) const {
  return absl::StrCat(dir_, "/", job_id, ".feedback");
}

std::vector<std::string> LocalStepsTrainer::Jobs() const {
  std::set<std::string> jobs;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [id, job] : jobs_) jobs.insert(id);
  }
  if (!dir_.empty()) {
    std::error_code error;
    for (std::filesystem::directory_iterator it(dir_, error), end; !error && it != end; it.increment(error)) {
      const std::filesystem::path& path = it->path();
      if (path.extension() == ".safetensors" && IsSafeFileName(path.stem().string()))
        jobs.insert(path.stem().string());
    }
  }
  return std::vector<std::string>(jobs.begin(), jobs.end());
}

void LocalStepsTrainer::Forget(const std::string& job_id) {
  std::shared_ptr<Job> job;
  {
    absl::MutexLock lock(&mutex_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) {
      job = std::move(it->second);
      jobs_.erase(it);
    }
  }
  auto remove_files = [&] {
    if (dir_.empty() || !IsSafeFileName(job_id)) return;
    std::error_code error;
    std::filesystem::remove(FeedbackPath(job_id), error);
    if (std::filesystem::remove(StatePath(job_id), error)) {
      base::LogInfo("job ", job_id, " finished: dropped its inner optimizer state");
    }
  };
  if (job == nullptr) {
    remove_files();
    return;
  }
  // Under the job's lock (a round in flight finishes first, and one waiting finds no file). A
  // scoped lock, not an optional one: clang's thread-safety analysis follows it.
  absl::MutexLock lock(&job->mutex);
  job->trainer.reset();
  job->feedback.clear();
  remove_files();
}

absl::Status LocalStepsTrainer::PrepareLocked(const std::string& job_id,
                                              const performer::PerformerModel& start,
                                              const v1::Optimizer& inner, Job* job) {
  if (job->trainer == nullptr) {
    absl::StatusOr<std::unique_ptr<performer::Trainer>> trainer = performer::Trainer::Create(
        start.config(), start.dtype(), start.parameters(), wire::OptimizerSettingsOf(inner));
    if (!trainer.ok()) return trainer.status();
    if (!dir_.empty()) {
      const std::string path = StatePath(job_id);
      std::error_code error;
      if (std::filesystem::exists(path, error)) {
        if (absl::Status loaded = (*trainer)->LoadOptimizerState(path); !loaded.ok()) {
          // Moments only shape later steps: start afresh rather than refuse the job's shards.
          base::LogWarning("job ", job_id, ": starting its inner optimizer afresh: ", loaded.message());
          absl::StatusOr<std::unique_ptr<performer::Trainer>> fresh = performer::Trainer::Create(
              start.config(), start.dtype(), start.parameters(), wire::OptimizerSettingsOf(inner));
          if (!fresh.ok()) return fresh.status();
          trainer = std::move(fresh);
        } else {
          base::LogInfo("job ", job_id, ": resumed its inner optimizer at step ", (*trainer)->steps());
        }
      }
    }
    job->trainer = *std::move(trainer);
    return absl::OkStatus();
  }
  return job->trainer->SetParameters(start.parameters());
}

absl::StatusOr<LocalStepsResult> LocalStepsTrainer::Run(
    const std::string& job_id, const performer::PerformerModel& start, const v1::LocalSteps& local,
    const std::vector<int64_t>& predicted_tokens, int64_t loss_normalizer, const SumGradients& sum_gradients,
    absl::Time deadline) {
  if (!dir_.empty() && !IsSafeFileName(job_id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job_id: \"", job_id, "\" cannot name a local-steps state file (letters, digits, '-', '_', '.')"));
  }
  std::shared_ptr<Job> job;
  {
    absl::MutexLock lock(&mutex_);
    std::shared_ptr<Job>& slot = jobs_[job_id];
    if (slot == nullptr) slot = std::make_shared<Job>();
    job = slot;
  }
  absl::MutexLock lock(&job->mutex);
  if (absl::Status prepared = PrepareLocked(job_id, start, local.inner_optimizer(), job.get());
      !prepared.ok()) {
    return prepared;
  }
  performer::Trainer& trainer = *job->trainer;
  // A round that does not finish leaves no trace: the next one starts from the state saved after
  // the last finished round (or afresh in memory-only mode).
  auto fail = [&job](absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(job->mutex) {
    job->trainer.reset();
    return status;
  };

  LocalStepsResult result;
  int64_t shard_tokens = 0;
  size_t begin = 0;
  absl::Duration longest = absl::ZeroDuration();  // of the steps taken so far
  for (int step = 0; step < local.sequences_per_step_size(); ++step) {
    const size_t end = begin + static_cast<size_t>(local.sequences_per_step(step));
    int64_t tokens = 0;
    for (size_t i = begin; i < end; ++i) tokens += predicted_tokens[i];
    // The round's time budget: another step only while the longest so far still fits.
    if (tokens > 0 && result.steps > 0 && absl::Now() + longest > deadline) break;
    const absl::Time step_started = absl::Now();
    if (tokens > 0) {
      // The model the inner step differentiates: the trainer's current values on the round's
      // device and dtype.
      std::map<std::string, at::Tensor> named;
      for (size_t t = 0; t < trainer.names().size(); ++t)
        named[trainer.names()[t]] = trainer.parameters()[t].detach();
      absl::StatusOr<performer::PerformerModel> at_step =
          performer::PerformerModel::FromTensors(start.config(), named, start.dtype(), start.device());
      if (!at_step.ok())
        return fail(
            absl::InternalError(absl::StrCat("inner step ", step + 1, ": ", at_step.status().message())));
      absl::StatusOr<SequenceSum> sum = sum_gradients(*at_step, begin, end, tokens);
      if (!sum.ok()) return fail(sum.status());
      if (sum->gradient.empty()) {
        return fail(absl::InternalError(
            absl::StrCat("inner step ", step + 1, ": no gradient over ", tokens, " predicted tokens")));
      }
      absl::StatusOr<performer::StepResult> stepped = trainer.Step(std::move(sum->gradient));
      if (!stepped.ok()) {
        return fail(
            absl::InternalError(absl::StrCat("inner step ", step + 1, " of ", local.sequences_per_step_size(),
                                             ": ", stepped.status().message())));
      }
      result.sum.loss_sum += sum->loss_sum;
      result.sum.token_count += sum->token_count;
      result.sum.slice_forwards += sum->slice_forwards;
      result.sum.compute_seconds += sum->compute_seconds;
      result.sum.peak_bytes = std::max(result.sum.peak_bytes, sum->peak_bytes);
      shard_tokens += tokens;
      ++result.steps;
      longest = std::max(longest, absl::Now() - step_started);
    }
    begin = end;
  }

  // (start − end) · shard tokens / the round's tokens, in the round's dtype on the round's device.
  const double weight = static_cast<double>(shard_tokens) / static_cast<double>(loss_normalizer);
  try {
    for (size_t t = 0; t < trainer.parameters().size(); ++t) {
      const at::Tensor& end_value = trainer.parameters()[t];
      const at::Tensor& start_value = start.parameters()[t];
      at::Tensor delta = start_value.detach().to(at::kCPU, end_value.scalar_type()).sub(end_value.detach());
      result.sum.gradient.push_back(delta.mul_(weight).to(start_value.options()));
    }
  } catch (const c10::Error& e) {
    return fail(
        absl::InternalError(absl::StrCat("computing the pseudo-gradient: ", e.what_without_backtrace())));
  }
  result.inner_steps_total = trainer.steps();

  const bool compressed = performer::IsCompressed(local.compression());
  if (compressed) {
    if (absl::Status s =
            EncodeWithFeedbackLocked(job_id, trainer.names(), local.compression(), job.get(), &result);
        !s.ok()) {
      return fail(s);
    }
  }
  if (!dir_.empty()) {
    std::error_code error;
    std::filesystem::create_directories(dir_, error);
    if (error) return fail(absl::InternalError(absl::StrCat("creating ", dir_, ": ", error.message())));
    if (compressed) {
      performer::TensorFile file;
      for (size_t t = 0; t < job->feedback.size(); ++t) file.tensors[trainer.names()[t]] = job->feedback[t];
      if (absl::Status saved = performer::WriteSafetensors(FeedbackPath(job_id), file); !saved.ok()) {
        return fail(absl::InternalError(absl::StrCat("saving the error feedback: ", saved.message())));
      }
    }
    // The inner state last: a round whose state is not saved leaves none (its feedback, already
    // replaced, is what its encoding lost either way).
    if (absl::Status saved = trainer.SaveOptimizerState(StatePath(job_id)); !saved.ok()) {
      return fail(absl::InternalError(absl::StrCat("saving the inner optimizer state: ", saved.message())));
    }
  }
  return result;
}

absl::Status LocalStepsTrainer::EncodeWithFeedbackLocked(const std::string& job_id,
                                                         const std::vector<std::string>& names,
                                                         v1::Compression compression, Job* job,
                                                         LocalStepsResult* result) {
  std::vector<at::Tensor>& gradient = result->sum.gradient;
  // The feedback of earlier rounds: in memory, or from the file a restarted worker left.
  if (!job->feedback_loaded) {
    job->feedback_loaded = true;
    job->feedback.clear();
    std::error_code error;
    if (!dir_.empty() && std::filesystem::exists(FeedbackPath(job_id), error)) {
      absl::StatusOr<performer::TensorFile> file = performer::ReadSafetensors(FeedbackPath(job_id));
      std::vector<at::Tensor> loaded;
      absl::Status problem = file.status();
      for (size_t t = 0; problem.ok() && t < names.size(); ++t) {
        auto it = file->tensors.find(names[t]);
        if (it == file->tensors.end() || !it->second.sizes().equals(gradient[t].sizes()) ||
            it->second.scalar_type() != at::kFloat) {
          problem = absl::InvalidArgumentError(
              absl::StrCat("no float32 tensor \"", names[t], "\" of shape ", c10::str(gradient[t].sizes())));
        } else {
          loaded.push_back(it->second);
        }
      }
      if (problem.ok()) {
        job->feedback = std::move(loaded);
      } else {
        base::LogWarning("job ", job_id, ": starting its error feedback at zero: ", FeedbackPath(job_id),
                         ": ", problem.message());
      }
    }
  }
  // Tensor by tensor, e is replaced in place (it and the encoded result are all this holds beside
  // the pseudo-gradient: performer::LocalStepsExtraBytes). A tensor that cannot be encoded (not
  // finite) fails the round and restarts e at zero.
  const bool fresh = job->feedback.size() != gradient.size();
  if (fresh) job->feedback.clear();
  auto give_up = [job](absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(job->mutex) {
    job->feedback.clear();
    return status;
  };
  try {
    for (size_t t = 0; t < gradient.size(); ++t) {
      at::Tensor value = gradient[t].detach().to(at::kCPU, at::kFloat);
      if (!fresh) value = value.add(job->feedback[t]);
      absl::StatusOr<performer::EncodedTensor> encoded = performer::EncodeTensor(value, compression);
      if (!encoded.ok()) {
        return give_up(absl::InternalError(absl::StrCat("encoding the pseudo-gradient of ", names[t], " as ",
                                                        performer::CompressionName(compression), ": ",
                                                        encoded.status().message())));
      }
      absl::StatusOr<at::Tensor> decoded = performer::DecodeTensor(*encoded);
      if (!decoded.ok()) return give_up(absl::InternalError(std::string(decoded.status().message())));
      if (fresh) {
        job->feedback.push_back(value.sub(*decoded));
      } else {
        at::sub_out(job->feedback[t], value, *decoded);
      }
      gradient[t] = decoded->to(gradient[t].options());
      result->encoded.push_back(*std::move(encoded));
    }
  } catch (const c10::Error& e) {
    return give_up(absl::InternalError(absl::StrCat("error feedback: ", e.what_without_backtrace())));
  }
  return absl::OkStatus();
}

}  // namespace slimfit::worker
