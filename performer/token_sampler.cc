#include "performer/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace slimfit::performer {

absl::Status ValidateSamplingOptions(const SamplingOptions& options) {
  if (!std::isfinite(options.temperature) || options.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be a finite number ≥ 0 (0: greedy), got ", options.temperature));
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be ≥ 0 (0: every token), got ", options.top_k));
  }
  return absl::OkStatus();
}

TokenSampler::TokenSampler(const SamplingOptions& options, uint64_t seed)
    : options_(options), generator_(seed) {}

int64_t TokenSampler::Next(const at::Tensor& log_probs) {
  const at::Tensor values = log_probs.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* data = values.data_ptr<double>();
  const int64_t vocab = values.numel();
  const int64_t greedy = std::max_element(data, data + vocab) - data;  // the first maximum
  const bool only_one = options_.top_k == 1 || vocab == 1;
  if (options_.temperature == 0 || only_one) return greedy;

  // Tokens below the k-th largest value are out; at the threshold, the lower ids are kept first.
  double threshold = -std::numeric_limits<double>::infinity();
  if (options_.top_k > 0 && options_.top_k < vocab) {
    std::vector<double> sorted(data, data + vocab);
    std::nth_element(sorted.begin(), sorted.begin() + (options_.top_k - 1), sorted.end(),
                     std::greater<double>());
    threshold = sorted[options_.top_k - 1];
  }
  // Every token above the threshold, and of those at it as many as k leaves room for, lowest first.
  int64_t room_at_threshold = vocab;
  if (options_.top_k > 0 && options_.top_k < vocab) {
    room_at_threshold =
        options_.top_k - std::count_if(data, data + vocab, [&](double v) { return v > threshold; });
  }
  const double top = data[greedy];
  std::vector<double> weights(vocab, 0.0);
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (data[i] < threshold) continue;
    if (data[i] == threshold && room_at_threshold-- <= 0) continue;
    weights[i] = std::exp((data[i] - top) / options_.temperature);
    total += weights[i];
  }
  // A uniform double in [0, 1) from the generator's top 53 bits.
  const double u = static_cast<double>(generator_() >> 11) * (1.0 / 9007199254740992.0);
  double target = u * total;
  for (int64_t i = 0; i < vocab; ++i) {
    if (weights[i] == 0) continue;
    if (target < weights[i]) return i;
    target -= weights[i];
  }
  return greedy;  // rounding left the draw past the last weight
}

}  // namespace slimfit::performer
