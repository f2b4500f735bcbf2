#include "performer/fused_cuda_kernels.h"

#include <atomic>

namespace slimfit::performer {
namespace {

std::atomic<bool> enabled{false};
std::atomic<bool> emulated{false};

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

}  // namespace slimfit::performer
