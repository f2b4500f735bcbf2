// What slimfit's .cu files share (nvcc only): the kernel bodies' views of a CUDA launch — one
// thread block (CudaThreads: the prefix_attention_kernel_bodies.h contract) or every thread of the
// grid (CudaGrid: grid-stride bodies) — and the launch sizes and error text.
#ifndef SLIMFIT_PERFORMER_CUDA_KERNEL_LAUNCH_CUH_
#define SLIMFIT_PERFORMER_CUDA_KERNEL_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace slimfit::performer::cuda_kernels {

// Threads per block of every kernel.
inline constexpr int kThreads = 256;

struct CudaThreads {
  __device__ int64_t Index() const { return threadIdx.x; }
  __device__ int64_t Count() const { return blockDim.x; }
  __device__ void Sync() const { __syncthreads(); }
};

struct CudaGrid {
  __device__ int64_t Index() const { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
  __device__ int64_t Count() const { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
};

// Blocks for a grid-stride loop over `entries` (at least one; at most 4,096: the loop covers more).
inline unsigned GridBlocks(int64_t entries) {
  return static_cast<unsigned>(std::clamp<int64_t>((entries + kThreads - 1) / kThreads, 1, 4096));
}

// Null when the last launch was accepted, else the runtime's error text.
inline const char* LaunchError() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace slimfit::performer::cuda_kernels

#endif  // SLIMFIT_PERFORMER_CUDA_KERNEL_LAUNCH_CUH_
