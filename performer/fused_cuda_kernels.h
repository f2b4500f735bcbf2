// The process-wide switch for slimfit's own CUDA kernels (prefix_attention_cuda.h: the prefix sums
// of short segments and a front without a stretch; layer_kernels_cuda.h: a layer's row-wise
// pieces). They replace sequences of LibTorch calls that on a GPU cost a kernel launch each.
//
// Built: only by the CUDA build, where it finds nvcc (scripts/cuda/CMakeLists.txt defines
// SLIMFIT_WITH_CUDA_KERNELS); in the Bazel build they never run on a device.
// Enabled: off by default until their tests have passed on a GPU.
// Emulated: for tests and op counts on machines without a GPU, the same kernel bodies run on
// emulated thread blocks over CPU tensors (emulated_thread_block.h: one host thread per CUDA thread,
// far slower than anything else here; not for production use). With both on, a float64 gradient on
// the CPU takes the GPU path's kernels end to end (the CPU's own kernels serve float32 first).
//
// Thread safety: atomic flags; do not flip them while a gradient runs (a backward could take another
// form than its forward — equal results to rounding, different speed).
#ifndef SLIMFIT_PERFORMER_FUSED_CUDA_KERNELS_H_
#define SLIMFIT_PERFORMER_FUSED_CUDA_KERNELS_H_

#include <ATen/ATen.h>

#include <initializer_list>

namespace slimfit::performer {

bool FusedCudaKernelsBuilt();
void EnableFusedCudaKernels(bool enabled);
void EmulateFusedCudaKernelsOnCpu(bool emulate);
bool FusedCudaKernelsEmulated();

// Enabled, and built or emulated.
bool FusedCudaKernelsEnabled();

// Enabled, and `t` lives where they run: a CUDA device in a build with them, the CPU while emulated.
bool FusedCudaKernelsTake(const at::Tensor& t);

// FusedCudaKernelsTake the first, and all of them defined, float32 or float64, of one dtype on one
// device (and, when `contiguous`, contiguous).
bool FusedCudaKernelsTakeAll(std::initializer_list<const at::Tensor*> tensors, bool contiguous = false);

// slimfit's kernels, for counting their runs.
enum class FusedKernel : int {
  kPrefixForward = 0,
  kPrefixBackward,
  kFrontWithout,
  kSplitHeads,
  kJoinHeadGradients,
  kNormalizeAttention,
  kNormalizeAttentionBackward,
  kColumnSums,
  kLayerNormBackward,
  kEmbed,
  kLayerNormAdd,
  kCount,  // not a kernel: how many there are
};
inline constexpr int kFusedKernelKinds = static_cast<int>(FusedKernel::kCount);
const char* FusedKernelName(FusedKernel kernel);

// Runs of each kernel in this process, launched or emulated (a run captured into a CUDA graph counts
// once, its replays not): tests check that the dispatch reaches them, gradient_bench reports them
// per slice beside LibTorch's calls.
void CountFusedKernelRun(FusedKernel kernel);
int64_t FusedKernelRuns(FusedKernel kernel);
int64_t FusedKernelRunsTotal();

// Host threads per emulated thread block (a thread block's bodies) and per emulated grid (the
// grid-stride bodies): few, since each emulated launch starts its threads afresh, but more than one,
// so that work splits and syncs run concurrently (the kernels' own tests use 1, 7 and 48).
inline constexpr int64_t kEmulatedBlockThreads = 4;
inline constexpr int64_t kEmulatedGridThreads = 2;

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_FUSED_CUDA_KERNELS_H_
