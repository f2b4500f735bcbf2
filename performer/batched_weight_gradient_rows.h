// How many inner rows the engine gathers before adding small CPU slices' weight gradients
// (performer/batched_weight_gradients.h), and the bytes its buffers take — a constant and a formula
// without LibTorch, for the planner's cost model (planner/cost_model.h).
//
// Thread safety: constants and a pure function.
#ifndef SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENT_ROWS_H_
#define SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENT_ROWS_H_

#include <cstdint>

namespace slimfit::performer {

// The engine batches the weight gradients of CPU slices shorter than this, adding products of
// exactly this many inner rows (fewer for the last of a call).
inline constexpr int64_t kBatchedWeightGradientRows = 64;

// The buffers for linear maps whose inputs and outputs add up to `sum_of_map_widths`: `rows` rows
// of each map's x and g.
inline int64_t BatchedWeightGradientBufferBytes(int64_t rows, int64_t sum_of_map_widths,
                                                int64_t dtype_bytes) {
  return rows * sum_of_map_widths * dtype_bytes;
}

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENT_ROWS_H_
