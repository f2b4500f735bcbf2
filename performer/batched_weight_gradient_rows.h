// Which plans the engine batches small CPU slices' weight gradients for
// (performer/batched_weight_gradients.h), how many inner rows it gathers, and the bytes its buffers
// take — without LibTorch, so the engine and the planner's cost model (planner/cost_model.h) share
// one rule.
//
// Thread safety: constants and pure functions.
#ifndef SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENT_ROWS_H_
#define SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENT_ROWS_H_

#include <cstdint>

#include "performer/model_config.h"
#include "performer/plan.h"

namespace slimfit::performer {

// The engine batches the weight gradients of CPU slices shorter than this, adding products of
// exactly this many inner rows (fewer for the last of a call).
inline constexpr int64_t kBatchedWeightGradientRows = 64;

// Whether a gradient call with `plan` on a CPU batches its weight gradients: slices shorter than
// kBatchedWeightGradientRows on the hand-written backward's path (chunked prefix sums, no layer
// recomputation), for every feature map, without bfloat16 products (each of which is rounded as it
// comes); a call that runs through autograd anyway (the hand-written path turned off) allocates
// nothing.
inline bool BatchesWeightGradients(const Plan& plan) {
  return plan.slice > 0 && plan.slice < kBatchedWeightGradientRows &&
         plan.prefix_mode == PrefixMode::kChunked && plan.recompute == LayerRecompute::kNone &&
         !plan.bf16_products;
}

// The buffers for such a call: kBatchedWeightGradientRows rows of every linear map's input and
// output — q|k|v (d → 3d) and the FFN's two maps (d → f → d) per layer, the output head
// (d → vocab) — in the plan's dtype; 0 for a plan that does not batch.
inline int64_t BatchedWeightGradientBytes(const ModelConfig& config, const Plan& plan) {
  if (!BatchesWeightGradients(plan)) return 0;
  const int64_t widths =
      config.layers * (6 * config.d_model + 2 * config.d_ff) + config.d_model + config.vocab;
  return kBatchedWeightGradientRows * widths * DTypeBytes(plan.dtype);
}

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENT_ROWS_H_
