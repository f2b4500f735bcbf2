// Weight gradients of small slices, added several slices at a time.
//
// A sliced backward adds xᵀ·g into each linear map's gradient once per slice, with as many inner
// rows as the slice has tokens. At 16 rows such a product reads and writes the whole gradient
// matrix for little arithmetic: in config A at C = 16 these products ran at ~105 GFLOP/s against
// ~210 for the same maps at 48 rows (BENCHMARKS.md, "What is each engine choice worth on a CPU?").
// BatchedWeightGradients keeps the rows of x and g of consecutive slices per gradient and adds
// them as one product of `rows` inner rows (a slice's rows split across two products where they
// do not fit; the last product of a call may be shorter): the same sum in another order (float
// rounding), a fraction of the passes over the gradient.
//
// Example:
//   BatchedWeightGradients batched(/*rows=*/64);
//   for (each slice, last to first) batched.Add(sink, x, g);   // sink += xᵀ·g, eventually
//   batched.Flush();                                           // before reading any sink
//
// Memory: for every gradient given rows fewer than `rows` at a time, a buffer of `rows` rows of x
// and of g (allocated on its first such Add, kept until destruction; a gradient whose additions
// all have `rows` rows or more gets none): BatchedWeightGradientBytes
// (batched_weight_gradient_rows.h) says how much for a model's call.
//
// Ownership: keeps references (tensor handles) to the gradients it was given; they must stay alive
// and unread until Flush(). Thread safety: not thread-safe; one gradient call's backward.
#ifndef SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENTS_H_
#define SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENTS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>

#include "performer/batched_weight_gradient_rows.h"

namespace slimfit::performer {

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

  // The bytes of the buffers allocated so far.
  int64_t allocated_bytes() const { return allocated_bytes_; }

 private:
  struct Pending {
    at::Tensor gradient;
    at::Tensor x, g;  // [rows_, m], [rows_, n]
    int64_t filled = 0;
  };
  void FlushOne(Pending& pending);

  const int64_t rows_;
  std::map<const void*, Pending> pending_;  // by the gradient's data
  int64_t allocated_bytes_ = 0;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_BATCHED_WEIGHT_GRADIENTS_H_
