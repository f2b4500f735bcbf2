#include "performer/fused_cuda_kernels.h"

#include <atomic>

namespace slimfit::performer {
namespace {

std::atomic<bool> enabled{false};
std::atomic<bool> emulated{false};
std::atomic<int64_t> runs[kFusedKernelKinds];  // zero-initialised (static storage)

}  // namespace

bool FusedCudaKernelsBuilt() {
#if defined(SLIMFIT_WITH_CUDA_KERNELS)
  return true;
#else
  return false;
#endif
}

void EnableFusedCudaKernels(bool on) { enabled.store(on, std::memory_order_relaxed); }

void EmulateFusedCudaKernelsOnCpu(bool on) { emulated.store(on, std::memory_order_relaxed); }

bool FusedCudaKernelsEmulated() { return emulated.load(std::memory_order_relaxed); }

bool FusedCudaKernelsEnabled() {
  return enabled.load(std::memory_order_relaxed) && (FusedCudaKernelsBuilt() || FusedCudaKernelsEmulated());
}

bool FusedCudaKernelsTake(const at::Tensor& t) {
  if (!enabled.load(std::memory_order_relaxed) || !t.defined()) return false;
  if (t.is_cuda()) return FusedCudaKernelsBuilt();
  return t.is_cpu() && FusedCudaKernelsEmulated();
}

bool FusedCudaKernelsTakeAll(std::initializer_list<const at::Tensor*> tensors, bool contiguous) {
  if (tensors.size() == 0) return false;
  const at::Tensor& first = **tensors.begin();
  if (!FusedCudaKernelsTake(first) ||
      (first.scalar_type() != at::kFloat && first.scalar_type() != at::kDouble)) {
    return false;
  }
  for (const at::Tensor* t : tensors) {
    if (!t->defined() || t->device() != first.device() || t->scalar_type() != first.scalar_type() ||
        (contiguous && !t->is_contiguous())) {
      return false;
    }
  }
  return true;
}

const char* FusedKernelName(FusedKernel kernel) {
  switch (kernel) {
    case FusedKernel::kPrefixForward:
      return "prefix_forward";
    case FusedKernel::kPrefixBackward:
      return "prefix_backward";
    case FusedKernel::kFrontWithout:
      return "front_without";
    case FusedKernel::kSplitHeads:
      return "split_heads";
    case FusedKernel::kJoinHeadGradients:
      return "join_head_gradients";
    case FusedKernel::kNormalizeAttention:
      return "normalize_attention";
    case FusedKernel::kNormalizeAttentionBackward:
      return "normalize_attention_backward";
    case FusedKernel::kColumnSums:
      return "column_sums";
    case FusedKernel::kLayerNormBackward:
      return "layer_norm_backward";
    case FusedKernel::kEmbed:
      return "embed";
    case FusedKernel::kLayerNormAdd:
      return "layer_norm_add";
    case FusedKernel::kCount:
      break;
  }
  return "unknown";
}

void CountFusedKernelRun(FusedKernel kernel) {
  runs[static_cast<int>(kernel)].fetch_add(1, std::memory_order_relaxed);
}

int64_t FusedKernelRuns(FusedKernel kernel) {
  return runs[static_cast<int>(kernel)].load(std::memory_order_relaxed);
}

int64_t FusedKernelRunsTotal() {
  int64_t total = 0;
  for (const std::atomic<int64_t>& r : runs) total += r.load(std::memory_order_relaxed);
  return total;
}

}  // namespace slimfit::performer
