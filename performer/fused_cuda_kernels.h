// The process-wide switch for slimfit's own CUDA kernels (prefix_attention_cuda.h: the prefix sums
// of short segments and a front without a stretch; layer_kernels_cuda.h: a layer's row-wise
// pieces). They replace sequences of LibTorch calls that on a GPU cost a kernel launch each.
//
// Built: only by the CUDA build, where it finds nvcc (scripts/cuda/CMakeLists.txt defines
// SLIMFIT_WITH_CUDA_KERNELS); in the Bazel build they are never built and never apply.
// Enabled: off by default until their tests have passed on a GPU (their thread code is tested on
// the CPU through an emulated thread block, emulated_thread_block.h, in every build).
//
// Thread safety: an atomic flag; do not flip it while a gradient runs (a backward could take another
// form than its forward — equal results to rounding, different speed).
#ifndef SLIMFIT_PERFORMER_FUSED_CUDA_KERNELS_H_
#define SLIMFIT_PERFORMER_FUSED_CUDA_KERNELS_H_

namespace slimfit::performer {

bool FusedCudaKernelsBuilt();
void EnableFusedCudaKernels(bool enabled);
// Built and enabled.
bool FusedCudaKernelsEnabled();

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_FUSED_CUDA_KERNELS_H_
