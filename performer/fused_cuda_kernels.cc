#include "performer/fused_cuda_kernels.h"

#include <atomic>

namespace slimfit::performer {
namespace {

std::atomic<bool> enabled{false};

}  // namespace

bool FusedCudaKernelsBuilt() {
#if defined(SLIMFIT_WITH_CUDA_KERNELS)
  return true;
#else
  return false;
#endif
}

void EnableFusedCudaKernels(bool on) { enabled.store(on, std::memory_order_relaxed); }

bool FusedCudaKernelsEnabled() { return FusedCudaKernelsBuilt() && enabled.load(std::memory_order_relaxed); }

}  // namespace slimfit::performer
