// One AdamW step (Loshchilov & Hutter, "Decoupled Weight Decay Regularization") over a parameter
// tensor in a single pass: weight decay, both moments, the bias-corrected update, and an optional
// scale of the gradient (global-norm clipping) — reading the parameter, gradient and moments once
// and writing the parameter and moments once, with nothing allocated.
//
// torch::optim::AdamW does the same step as eight tensor operations (nine with weight decay; each a
// pass over memory) and allocates two temporaries the size of the parameter for the denominator; at the
// coordinator's model sizes the step is memory-bound, so one pass is several times faster. The arithmetic is
// torch::optim::AdamW's, operation for operation, in the tensor's dtype:
//   p ← p · (1 − lr·wd)                       (when wd ≠ 0)
//   m ← m · β₁ + (1 − β₁) · g
//   v ← v · β₂ + (1 − β₂) · g · g
//   p ← p − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)
// where g is the gradient times `gradient_scale` (rounded to the dtype first, as g.mul_(scale)
// would). The result equals LibTorch's to a few ulps: LibTorch's vectorised kernels fuse some
// multiply-adds, this loop does not (-ffp-contract=off), so the last bit can differ.
//
// Thread safety: a pure function of its arguments; the tensors must not be touched by others while
// it runs. It splits the elements across LibTorch's intra-op threads.
#ifndef SLIMFIT_PERFORMER_ADAMW_STEP_H_
#define SLIMFIT_PERFORMER_ADAMW_STEP_H_

#include <ATen/ATen.h>

#include <cstdint>

namespace slimfit::performer {

struct AdamWHyperparameters {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0;
};

// Whether AdamWStep runs on these tensors: contiguous CPU tensors of one dtype, float32 or
// float64, all of the parameter's number of elements.
bool AdamWStepApplies(const at::Tensor& parameter, const at::Tensor& gradient, const at::Tensor& exp_avg,
                      const at::Tensor& exp_avg_sq);

// Step number `step` (1-based: the bias corrections use it) of AdamW on `parameter`, updating
// `exp_avg` and `exp_avg_sq` in place; `gradient` is read only.
// REQUIRES: AdamWStepApplies(...), step ≥ 1; a violation throws c10::Error.
void AdamWStep(at::Tensor& parameter, const at::Tensor& gradient, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
               int64_t step, const AdamWHyperparameters& hyper, double gradient_scale = 1.0);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_ADAMW_STEP_H_
