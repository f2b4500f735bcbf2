// Choosing the next token from a model's log-probabilities: greedy, or sampled with a temperature,
// optionally among the top k tokens only. Deterministic for a seed on every platform (the uniform
// draw is computed from the 64-bit Mersenne Twister's output directly, not by a library
// distribution whose algorithm may differ between standard libraries).
//
// Example:
//   TokenSampler sampler({.temperature = 0.8, .top_k = 40}, /*seed=*/1);
//   int64_t next = sampler.Next(log_probs);
//
// Thread safety: a TokenSampler holds its generator; one thread at a time.
#ifndef SLIMFIT_PERFORMER_TOKEN_SAMPLER_H_
#define SLIMFIT_PERFORMER_TOKEN_SAMPLER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <random>

#include "absl/status/status.h"

namespace slimfit::performer {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the most likely token); otherwise logits / temperature
  int64_t top_k = 0;         // 0: every token; k: only the k most likely
};

// INVALID_ARGUMENT naming the field for a negative or non-finite temperature or a negative top_k.
absl::Status ValidateSamplingOptions(const SamplingOptions& options);

class TokenSampler {
 public:
  // REQUIRES: ValidateSamplingOptions(options).ok().
  TokenSampler(const SamplingOptions& options, uint64_t seed);

  // The next token from log-probabilities (or logits) over the vocabulary: a 1-D floating tensor
  // of finite values (any device). Ties go to the lower id.
  int64_t Next(const at::Tensor& log_probs);

 private:
  SamplingOptions options_;
  std::mt19937_64 generator_;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_TOKEN_SAMPLER_H_
