// The shapes every form of the chunked prefix sums takes (prefix_attention.h: the LibTorch block
// form, prefix_attention_blocks.h, prefix_attention_cpu.h, prefix_attention_cuda.h): φq, φk
// [k, S, M], v [k, S, d], the start front [k, M, d] and [k, M], and the gradients of the outputs
// (numerators [k, S, d], denominators [k, S], end front as the start's). One place for the forms'
// checks, so that each refuses the same tensors, naming itself. k, M, d, block ≥ 1; S ≥ 0 here, and
// the forms that need rows (the block-parallel form, the CUDA kernels) ask for S ≥ 1 themselves.
// Thread safety: pure functions.
#ifndef SLIMFIT_PERFORMER_PREFIX_SHAPES_H_
#define SLIMFIT_PERFORMER_PREFIX_SHAPES_H_

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdint>

namespace slimfit::performer {

inline bool PrefixShapesHold(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
  return block >= 1 && q.dim() == 3 && k.sizes() == q.sizes() && v.dim() == 3 && v.size(0) == q.size(0) &&
         v.size(1) == q.size(1) && q.size(0) >= 1 && q.size(2) >= 1 && v.size(2) >= 1 &&
         r0.sizes() == at::IntArrayRef({q.size(0), q.size(2), v.size(2)}) &&
         z0.sizes() == at::IntArrayRef({q.size(0), q.size(2)});
}

// A c10::Error naming `form` and the shapes unless PrefixShapesHold.
inline void CheckPrefixShapes(const char* form, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
  TORCH_CHECK(PrefixShapesHold(q, k, v, r0, z0, block), form, ": φq ", q.sizes(), ", φk ", k.sizes(), ", v ",
              v.sizes(), ", front ", r0.sizes(), " / ", z0.sizes(), " and block ", block,
              " are not [k, S, M], [k, S, M], [k, S, d], [k, M, d] / [k, M] and ≥ 1");
}

inline bool PrefixGradientShapesHold(const at::Tensor& q, const at::Tensor& v, const at::Tensor& r0,
                                     const at::Tensor& z0, const at::Tensor& grad_numerator,
                                     const at::Tensor& grad_denominator, const at::Tensor& grad_end_numerator,
                                     const at::Tensor& grad_end_denominator) {
  return grad_numerator.sizes() == v.sizes() && grad_denominator.sizes() == q.sizes().slice(0, 2) &&
         grad_end_numerator.sizes() == r0.sizes() && grad_end_denominator.sizes() == z0.sizes();
}

inline void CheckPrefixGradientShapes(const char* form, const at::Tensor& q, const at::Tensor& v,
                                      const at::Tensor& r0, const at::Tensor& z0,
                                      const at::Tensor& grad_numerator, const at::Tensor& grad_denominator,
                                      const at::Tensor& grad_end_numerator,
                                      const at::Tensor& grad_end_denominator) {
  TORCH_CHECK(PrefixGradientShapesHold(q, v, r0, z0, grad_numerator, grad_denominator, grad_end_numerator,
                                       grad_end_denominator),
              form, ": the output gradients ", grad_numerator.sizes(), ", ", grad_denominator.sizes(), ", ",
              grad_end_numerator.sizes(), " / ", grad_end_denominator.sizes(),
              " do not have the outputs' shapes");
}

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PREFIX_SHAPES_H_
