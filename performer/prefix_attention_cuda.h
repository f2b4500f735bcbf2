// The chunked causal prefix sums of a short segment (at most kFusedCudaMaxBlocks blocks: the small
// slices whose time on a GPU is kernel launches) as one fused CUDA kernel each way, for
// prefix_attention.cc's block form. The kernels themselves are prefix_attention_cuda_kernels.h;
// this is their ATen face: which tensors they take, output allocation, the current stream.
//
// Also FrontWithout (the reverse front policy's entry front of every slice) as one kernel.
//
// Status (fused_cuda_kernels.h): built by the CUDA build only, off by default until verified on a
// GPU (EnableFusedCudaKernels, gradient_bench --fused_cuda_kernels). The kernels' arithmetic and
// synchronisation are tested on the CPU by emulating a thread block (prefix_attention_cuda_test.cc).
//
// Results equal the LibTorch block form (ChunkedPrefixForward / ChunkedPrefixBackward) to rounding:
// same equations, same block order, sums within a block in another order.
//
// Thread safety: pure functions of their tensors.
#ifndef SLIMFIT_PERFORMER_PREFIX_ATTENTION_CUDA_H_
#define SLIMFIT_PERFORMER_PREFIX_ATTENTION_CUDA_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "performer/fused_cuda_kernels.h"
#include "performer/prefix_attention_cpu.h"
#include "performer/prefix_attention_cuda_kernels.h"

namespace slimfit::performer {

// Segments of up to this many blocks take the fused kernels (a thread block walks them one after
// another); longer ones take the block-parallel form (prefix_attention_blocks.h).
inline constexpr int64_t kFusedCudaMaxBlocks = 2;

// True when the kernels take these tensors: FusedCudaKernelsEnabled(), float32 or float64 CUDA tensors of one
// dtype on one device, shapes as prefix_attention.h's, S ≤ kFusedCudaMaxBlocks · block, and the
// shared memory a thread block needs within what the device allows.
bool FusedCudaPrefixApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& r0, const at::Tensor& z0, int64_t block);

// FusedCudaPrefixApplies, and the output gradients defined, of the outputs' shapes, on the same
// device in the same dtype.
bool FusedCudaPrefixBackwardApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                    const at::Tensor& grad_numerator, const at::Tensor& grad_denominator,
                                    const at::Tensor& grad_end_numerator,
                                    const at::Tensor& grad_end_denominator);

// REQUIRES: FusedCudaPrefixApplies(q, k, v, r0, z0, block). Fresh contiguous outputs; a launch the
// runtime refuses is a c10::Error.
FusedPrefixForward FusedPrefixForwardCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& r0, const at::Tensor& z0, int64_t block);

// The gradients of every input given those of the four outputs (each defined, the forward's shapes,
// the inputs' dtype and device). REQUIRES: FusedCudaPrefixBackwardApplies(…).
FusedPrefixGradients FusedPrefixBackwardCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                             const at::Tensor& grad_numerator,
                                             const at::Tensor& grad_denominator,
                                             const at::Tensor& grad_end_numerator,
                                             const at::Tensor& grad_end_denominator);

// prefix_attention.h's FrontWithout as one kernel: after_numerator − Σ φk ⊗ v, after_denominator −
// Σ φk. True when FusedCudaKernelsEnabled(), the tensors are CUDA float32 or float64 of one dtype on
// one device, φk [k, S, M], v [k, S, d] and the front [k, M, d], [k, M].
bool FusedCudaFrontWithoutApplies(const at::Tensor& after_numerator, const at::Tensor& after_denominator,
                                  const at::Tensor& k, const at::Tensor& v);
// REQUIRES: FusedCudaFrontWithoutApplies(…). Fresh contiguous outputs.
FusedFront FusedFrontWithoutCuda(const at::Tensor& after_numerator, const at::Tensor& after_denominator,
                                 const at::Tensor& k, const at::Tensor& v);

namespace internal {

// The kernels' arguments for these tensors, with fresh outputs allocated beside the inputs. Device
// agnostic, so the CPU test can run the kernel bodies on CPU tensors. `kept` holds copies made of
// inputs whose innermost stride is not 1; they must outlive the work.
template <typename T>
struct PreparedForward {
  cuda_kernels::PrefixForwardArgs<T> args;
  FusedPrefixForward out;
  std::vector<at::Tensor> kept;
};
template <typename T>
struct PreparedBackward {
  cuda_kernels::PrefixBackwardArgs<T> args;
  FusedPrefixGradients out;
  std::vector<at::Tensor> kept;  // and the block-start fronts' scratch
};

// REQUIRES: shapes as prefix_attention.h's (checked: a c10::Error otherwise), block ≥ 1, every
// tensor of dtype T on one device.
template <typename T>
PreparedForward<T> PrepareForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& r0, const at::Tensor& z0, int64_t block);
template <typename T>
PreparedBackward<T> PrepareBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                    const at::Tensor& grad_numerator, const at::Tensor& grad_denominator,
                                    const at::Tensor& grad_end_numerator,
                                    const at::Tensor& grad_end_denominator);

template <typename T>
struct PreparedFrontWithout {
  cuda_kernels::FrontWithoutArgs<T> args;
  FusedFront out;
  std::vector<at::Tensor> kept;
};
// REQUIRES: shapes as FusedCudaFrontWithoutApplies's (checked: a c10::Error otherwise), every tensor
// of dtype T on one device.
template <typename T>
PreparedFrontWithout<T> PrepareFrontWithout(const at::Tensor& after_numerator,
                                            const at::Tensor& after_denominator, const at::Tensor& k,
                                            const at::Tensor& v);

}  // namespace internal
}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PREFIX_ATTENTION_CUDA_H_
