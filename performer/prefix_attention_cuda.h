// The chunked causal prefix sums of a short segment (at most kFusedCudaMaxBlocks blocks: the small
// slices whose time on a GPU is kernel launches) as one fused CUDA kernel each way, for
// prefix_attention.cc's block form. The kernels themselves are prefix_attention_cuda_kernels.h;
// this is their ATen face: which tensors they take, output allocation, the current stream.
//
// Status: built by the CUDA build only (scripts/cuda/CMakeLists.txt compiles the .cu with nvcc and
// defines SLIMFIT_WITH_CUDA_KERNELS); in the Bazel build FusedCudaPrefixKernelsBuilt() is false and
// nothing here runs on a device. The kernels' arithmetic and synchronisation are tested on the CPU
// by emulating a thread block (prefix_attention_cuda_test.cc); they stay off by default until the
// same test has passed on a GPU (EnableFusedCudaPrefixKernels, gradient_bench --fused_prefix_cuda).
//
// Results equal the LibTorch block form (ChunkedPrefixForward / ChunkedPrefixBackward) to rounding:
// same equations, same block order, sums within a block in another order.
//
// Thread safety: pure functions of their tensors; the enable flag is atomic (do not flip it while a
// prefix sum runs: its backward would take the other form — equal results, different speed).
#ifndef SLIMFIT_PERFORMER_PREFIX_ATTENTION_CUDA_H_
#define SLIMFIT_PERFORMER_PREFIX_ATTENTION_CUDA_H_

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "performer/prefix_attention_cpu.h"
#include "performer/prefix_attention_cuda_kernels.h"

namespace slimfit::performer {

// Segments of up to this many blocks take the fused kernels (a thread block walks them one after
// another); longer ones take the block-parallel form (prefix_attention_blocks.h).
inline constexpr int64_t kFusedCudaMaxBlocks = 2;

// Whether this build compiled the kernels.
bool FusedCudaPrefixKernelsBuilt();

// Turns the kernels on or off process-wide (off by default: see Status above).
void EnableFusedCudaPrefixKernels(bool enabled);
bool FusedCudaPrefixKernelsEnabled();

// True when the kernels take these tensors: built and enabled, float32 or float64 CUDA tensors of one
// dtype on one device, shapes as prefix_attention.h's, S ≤ kFusedCudaMaxBlocks · block, and the
// shared memory a thread block needs within what the device allows.
bool FusedCudaPrefixApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& r0,
                            const at::Tensor& z0, int64_t block);

// REQUIRES: FusedCudaPrefixApplies(q, k, v, r0, z0, block). Fresh contiguous outputs; a launch the
// runtime refuses is a c10::Error.
FusedPrefixForward FusedPrefixForwardCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& r0, const at::Tensor& z0, int64_t block);

// The gradients of every input given those of the four outputs (each defined, the forward's shapes,
// the inputs' dtype and device). REQUIRES: as FusedPrefixForwardCuda.
FusedPrefixGradients FusedPrefixBackwardCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                             const at::Tensor& grad_numerator, const at::Tensor& grad_denominator,
                                             const at::Tensor& grad_end_numerator,
                                             const at::Tensor& grad_end_denominator);

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
                                    const at::Tensor& grad_end_numerator, const at::Tensor& grad_end_denominator);

}  // namespace internal
}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PREFIX_ATTENTION_CUDA_H_
