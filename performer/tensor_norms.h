// Whole-tensor reductions the coordinator runs on every tensor of every shard and step, without
// the temporaries LibTorch builds for them (x.to(kDouble).pow(2).sum() allocates and fills two
// float64 copies of x, abs().max() one copy of x): one pass over x, nothing allocated.
//
// Contiguous float32 and float64 CPU tensors are reduced in place across LibTorch's threads; other
// dtypes, layouts and devices go through LibTorch. Thread safety: pure functions.
#ifndef SLIMFIT_PERFORMER_TENSOR_NORMS_H_
#define SLIMFIT_PERFORMER_TENSOR_NORMS_H_

#include <ATen/ATen.h>

namespace slimfit::performer {

// Σ x², accumulated in float64. NaN or inf when an element is.
double SquaredNorm(const at::Tensor& x);

// max |x|; 0 for an empty tensor; NaN when an element is NaN, inf when one is infinite.
double MaxMagnitude(const at::Tensor& x);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_TENSOR_NORMS_H_
