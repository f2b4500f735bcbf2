// LocalStepsTrainer: a worker's side of a local-steps round (JobSpec.local_steps; DiLoCo,
// Douillard et al. 2023). From the round's parameters, one step of the job's inner optimizer per
// entry of LocalSteps.sequences_per_step, each with the exact gradient of the mean loss of its
// sequences (computed by the caller's SumGradients: the same sliced engine as a synchronous
// shard); then the pseudo-gradient (start − end) · shard predicted tokens / loss_normalizer, so
// that the shards' sum is the token-weighted mean of the workers' pseudo-gradients.
//
// The inner optimizer (a performer::Trainer: its moments and step count, so its warm-up) is the
// worker's own per job: kept in memory from round to round and written after every round to
// <dir>/<job_id>.safetensors (atomically), from which a restarted worker resumes it. A file that
// cannot be read or belongs to another optimizer is set aside with a warning and the job's inner
// optimizer starts afresh (its moments only shape later steps; the parameters always come from the
// coordinator). Forget(job) drops both. What it holds beside the round's parameters:
// performer::LocalStepsExtraBytes.
//
// Compressed pseudo-gradients (LocalSteps.compression): the worker sends encode(g + e), where g
// is the round's weighted pseudo-gradient and e what earlier rounds' encodings lost, and keeps
// e' = g + e − decode(encode(g + e)) (error feedback: Seide et al. 2014, Karimireddy et al. 2019),
// in memory and in <dir>/<job_id>.feedback (safetensors, float32, written after each round). A
// round that fails before its pseudo-gradient is encoded leaves e as it was (e is replaced, tensor
// by tensor in place, as it is encoded; a value that cannot be encoded restarts e at zero); a
// feedback file that cannot be read restarts e at zero with a warning.
//
// Thread safety: safe for concurrent use; Run calls for the same job are serialized (a worker
// runs one shard at a time anyway).
#ifndef SLIMFIT_WORKER_LOCAL_STEPS_H_
#define SLIMFIT_WORKER_LOCAL_STEPS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "performer/performer_model.h"
#include "performer/trainer.h"
#include "proto/slimfit.pb.h"
#include "wire/tensor_codec.h"

namespace slimfit::worker {

// What the engine gave for some consecutive sequences of a shard.
struct SequenceSum {
  std::vector<at::Tensor> gradient;  // model order; empty when no sequence predicted anything
  double loss_sum = 0;               // nats
  int64_t token_count = 0;           // predicted tokens
  int64_t slice_forwards = 0;
  double compute_seconds = 0;
  int64_t peak_bytes = 0;
};

// The gradient of Σ loss_sum / `normalizer` over sequences [begin, end) of the shard at `model`'s
// parameters; errors pass through Run unchanged (CANCELLED, RESOURCE_EXHAUSTED, ...).
using SumGradients = std::function<absl::StatusOr<SequenceSum>(const performer::PerformerModel& model,
                                                               size_t begin, size_t end, int64_t normalizer)>;

struct LocalStepsResult {
  // gradient: the weighted pseudo-gradient (exact rounds) or its decoded encoding (compressed: the
  // values the coordinator receives); the rest summed over the inner steps.
  SequenceSum sum;
  // Compressed rounds: what travels, one per parameter in model order; empty for exact rounds.
  std::vector<performer::EncodedTensor> encoded;
  int steps = 0;                  // inner steps taken (steps over no predicted tokens skipped)
  int64_t inner_steps_total = 0;  // this worker's inner steps for the job so far
};

class LocalStepsTrainer {
 public:
  // `dir`: where each job's inner optimizer state is kept (created on first write); empty keeps it
  // in memory only.
  explicit LocalStepsTrainer(std::string dir) : dir_(std::move(dir)) {}
  LocalStepsTrainer(const LocalStepsTrainer&) = delete;
  LocalStepsTrainer& operator=(const LocalStepsTrainer&) = delete;

  // Runs the inner steps of one shard. `start`: the round's parameters; `predicted_tokens[i]`: the
  // predicted tokens of sequence i (size = the shard's sequence count); `loss_normalizer`: the
  // request's (the round's predicted tokens, > 0). REQUIRES: `local` validated against the shard
  // (ValidateShardRequest). `deadline` (LocalSteps.time_budget_seconds from the shard's start): a
  // step after the first begins only if the longest step so far still fits before it; the
  // pseudo-gradient is weighted by the predicted tokens of the steps taken. INVALID_ARGUMENT for a
  // job id that is not a safe file name when state is kept on disk; INTERNAL for an optimizer or
  // file error; the gradient function's errors.
  absl::StatusOr<LocalStepsResult> Run(const std::string& job_id, const performer::PerformerModel& start,
                                       const v1::LocalSteps& local,
                                       const std::vector<int64_t>& predicted_tokens, int64_t loss_normalizer,
                                       const SumGradients& sum_gradients,
                                       absl::Time deadline = absl::InfiniteFuture());

  // Drops the job's inner optimizer, in memory and on disk. Idempotent.
  void Forget(const std::string& job_id);

  // Jobs whose inner optimizer state this worker holds, in memory or on disk (a state file left
  // by an earlier run included): what heartbeats report, so the coordinator names the finished ones.
  std::vector<std::string> Jobs() const;

 private:
  struct Job {
    absl::Mutex mutex;  // serializes the job's rounds
    std::unique_ptr<performer::Trainer> trainer ABSL_GUARDED_BY(mutex);
    // What earlier rounds' encodings lost (float32, CPU, model order); empty: zero / not loaded.
    std::vector<at::Tensor> feedback ABSL_GUARDED_BY(mutex);
    bool feedback_loaded ABSL_GUARDED_BY(mutex) = false;
  };
  std::string StatePath(const std::string& job_id) const;
  std::string FeedbackPath(const std::string& job_id) const;
  // Encodes the pseudo-gradient in `result` with the job's error feedback (result->encoded, and
  // result->sum.gradient decoded); the job's feedback becomes what this encoding lost.
  absl::Status EncodeWithFeedbackLocked(const std::string& job_id, const std::vector<std::string>& names,
                                        v1::Compression compression, Job* job, LocalStepsResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(job->mutex);
  // The job's trainer at `start`'s values, created (and its saved state loaded) on first use.
  absl::Status PrepareLocked(const std::string& job_id, const performer::PerformerModel& start,
                             const v1::Optimizer& inner, Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(job->mutex);

  const std::string dir_;
  mutable absl::Mutex mutex_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_LOCAL_STEPS_H_
