// Weight gradients of small slices, added several slices at a time.
//
// A sliced backward adds xᵀ·g into each linear map's gradient once per slice, with as many inner
// rows as the slice has tokens. At 16 rows such a product reads and writes the whole gradient
// matrix for little arithmetic: in config A at C = 16 these products ran at ~105 GFLOP/s against
// ~210 for the same maps at 48 rows (BENCHMARKS.md, "Weight gradients a few slices at a time").
// BatchedWeightGradients keeps the rows of x and g of consecutive slices per gradient and adds
// them as one product of up to `rows` inner rows: the same sum in another order (float rounding),
// a fraction of the passes over the gradient.
//
// Example:
//   BatchedWeightGradients batched(/*rows=*/64);
//   for (each slice, last to first) batched.Add(sink, x, g);   // sink += xᵀ·g, eventually
//   batched.Flush();                                           // before reading any sink
//
// Memory: for every gradient it has seen, a buffer of `rows` rows of x and of g (allocated on the
// first Add, kept until destruction): BufferBytes() says how much, for the cost model.
//
// Ownership: keeps references (tensor handles) to the gradients it was given; they must stay alive
// and unread until Flush(). Thread safety: not thread-safe; one gradient call's backward.
#ifndef SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENTS_H_
#define SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENTS_H_

#include <cstdint>
#include <map>

#include <ATen/ATen.h>

namespace slimfit::performer {

// The inner rows gathered before a product: the engine batches the weight gradients of CPU slices
// shorter than this (gradient_engine.cc), and the planner counts the buffers (cost_model.h).
inline constexpr int64_t kBatchedWeightGradientRows = 64;

class BatchedWeightGradients {
 public:
  // REQUIRES: rows ≥ 1.
  explicit BatchedWeightGradients(int64_t rows) : rows_(rows) {}
  BatchedWeightGradients(const BatchedWeightGradients&) = delete;
  BatchedWeightGradients& operator=(const BatchedWeightGradients&) = delete;

  // gradient += xᵀ·g, now or at a later Add or Flush. x [r, m] and g [r, n] are copied when kept
  // (the caller may free them); r ≥ rows goes straight to the gradient. REQUIRES: gradient [m, n],
  // the same dtype and device as x and g; every Add for one gradient passes the same tensor.
  void Add(at::Tensor& gradient, const at::Tensor& x, const at::Tensor& g);

  // Adds everything kept to its gradient.
  void Flush();

  // The bytes of the buffers a model's linear maps need: rows · Σ (inputs + outputs) · dtype bytes.
  static int64_t BufferBytes(int64_t rows, int64_t sum_of_map_widths, int64_t dtype_bytes) {
    return rows * sum_of_map_widths * dtype_bytes;
  }

 private:
  struct Pending {
    at::Tensor gradient;
    at::Tensor x, g;  // [rows_, m], [rows_, n]
    int64_t filled = 0;
  };
  void FlushOne(Pending& pending);

  const int64_t rows_;
  std::map<const void*, Pending> pending_;  // by the gradient's data
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENTS_H_
