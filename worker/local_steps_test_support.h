// Test fixtures shared by LocalStepsTrainer's tests (local_steps_test.cc: inner steps and the inner
// optimizer's state; local_steps_feedback_test.cc: compressed pseudo-gradients and their error
// feedback). Test-only (testonly = 1).
//
// A tiny float64 model (Tiny, Model, ModelAt), a four-sequence shard (Shard, Sequence,
// PredictedTokens), the real gradient engine as a SumGradients (Engine) or one that always fails
// (OutOfMemory), the inner optimizers (Steps, Sgd, AdamW), tensor-list arithmetic (Clone, Sum,
// MaxAbs, MaxAbsDifference), the files a trainer keeps per job (StateFile, FeedbackFile,
// ReadFeedback), and the checks of a compressed round's encoding (ExpectSendsItsEncoding,
// ExpectWithinInt8Bound). Failures inside the helpers fail the calling test (EXPECT / ADD_FAILURE).
//
// Example:
//   const std::vector<performer::PackedBatch> sequences = Shard();
//   LocalStepsTrainer trainer(testing_util::TempPath("job"));
//   absl::StatusOr<LocalStepsResult> result = trainer.Run(kJob, Model(1), Steps({2, 2}, Sgd(0.5)),
//       PredictedTokens(sequences), kNormalizer, Engine(&sequences));
//
// Thread safety: the helpers keep no state; Engine's counter is the caller's.
#ifndef SLIMFIT_WORKER_LOCAL_STEPS_TEST_SUPPORT_H_
#define SLIMFIT_WORKER_LOCAL_STEPS_TEST_SUPPORT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "performer/model_config.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/plan.h"
#include "proto/slimfit.pb.h"
#include "wire/tensor_codec.h"
#include "worker/local_steps.h"

namespace slimfit::worker::local_steps_testing {

inline constexpr char kJob[] = "job-000001";
inline constexpr int64_t kNormalizer = 100;  // the round's predicted tokens: more than Shard()'s

// vocab 16, d_model 8, one layer of two heads, d_ff 8.
performer::ModelConfig Tiny();
// Tiny() in float64 on the CPU, initialised from `seed`.
performer::PerformerModel Model(uint64_t seed);
// Tiny() in float64 with `parameters` (model order).
performer::PerformerModel ModelAt(const std::vector<at::Tensor>& parameters);

// `length` tokens (a pattern of `salt`) with documents starting at `doc_starts`.
performer::PackedBatch Sequence(int64_t length, int64_t salt, std::vector<int64_t> doc_starts = {0});
// A shard of four sequences (5, 4, 3 and 5 predicted tokens: 17).
std::vector<performer::PackedBatch> Shard();
std::vector<int64_t> PredictedTokens(const std::vector<performer::PackedBatch>& sequences);
// Full back-propagation in float64.
performer::Plan FullPlan();

// What worker_service.cc's sum_sequences does: the engine over sequences [begin, end), gradients
// of Σ loss_sum / normalizer summed. Counts its calls in `*calls` when given. `sequences` must
// outlive the function.
SumGradients Engine(const std::vector<performer::PackedBatch>* sequences, int* calls = nullptr);
// An engine that fails every call with RESOURCE_EXHAUSTED "out of memory".
SumGradients OutOfMemory();

v1::LocalSteps Steps(std::vector<int64_t> sequences_per_step, const v1::Optimizer& inner);
// `local` with its compression set to `compression`.
v1::LocalSteps Compressed(v1::LocalSteps local, v1::Compression compression);
// Plain SGD, no warm-up.
v1::Optimizer Sgd(double learning_rate);
// Warm-up over three steps, so the step count carried across rounds shows in the learning rate.
v1::Optimizer AdamW();

std::vector<at::Tensor> Clone(const std::vector<at::Tensor>& tensors);
// Σ of the lists, element by element, in float64.
std::vector<at::Tensor> Sum(const std::vector<std::vector<at::Tensor>>& lists);
// max |a[i] − b[i]| over every element of every tensor (in float64); the lists must be as long.
double MaxAbsDifference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);
double MaxAbs(const std::vector<at::Tensor>& tensors);
// Float32 arithmetic on values of this size: what "equal to float tolerance" allows.
double FloatTolerance(const std::vector<at::Tensor>& values);

// kJob's inner optimizer state and error feedback files in a trainer's `dir`.
std::string StateFile(const std::string& dir);
std::string FeedbackFile(const std::string& dir);
// The feedback file's tensors in model order; each must be float32 of its parameter's shape.
std::vector<at::Tensor> ReadFeedback(const std::string& dir);
// Each encoding decoded (float32).
std::vector<at::Tensor> Decoded(const std::vector<performer::EncodedTensor>& encoded);

// The checks every compressed round passes: one encoding per parameter, in `compression`, of the
// parameter's shape; the returned gradient is exactly its decoding, in the round's dtype.
void ExpectSendsItsEncoding(const LocalStepsResult& result, const performer::PerformerModel& start,
                            v1::Compression compression);
// |decoded − value| within int8's bound: half the scale of the element's block, the scale being
// max|block| / 127 of `value` (float32 rounding of both allowed for).
void ExpectWithinInt8Bound(const std::vector<performer::EncodedTensor>& encoded,
                           const std::vector<at::Tensor>& value);

}  // namespace slimfit::worker::local_steps_testing

#endif  // SLIMFIT_WORKER_LOCAL_STEPS_TEST_SUPPORT_H_
