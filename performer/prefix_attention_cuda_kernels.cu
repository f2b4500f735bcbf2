// The fused CUDA prefix-sum kernels: prefix_attention_cuda_kernels.h states the contract,
// prefix_attention_kernel_bodies.h holds what a thread block does, and prefix_attention.cc's
// ChunkedPrefixFunction comment derives the equations.
#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <utility>

#include "performer/cuda_kernel_launch.cuh"
#include "performer/prefix_attention_cuda_kernels.h"
#include "performer/prefix_attention_kernel_bodies.h"

namespace slimfit::performer::cuda_kernels {
namespace {

// One thread block per head.
template <typename T>
__global__ void __launch_bounds__(kThreads) PrefixForwardKernel(PrefixForwardArgs<T> args) {
  extern __shared__ __align__(16) unsigned char shared[];  // aligned for double tiles
  PrefixForwardHead(CudaThreads(), args, blockIdx.x, reinterpret_cast<T*>(shared));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) PrefixBackwardKernel(PrefixBackwardArgs<T> args) {
  extern __shared__ __align__(16) unsigned char shared[];  // aligned for double tiles
  PrefixBackwardHead(CudaThreads(), args, blockIdx.x, reinterpret_cast<T*>(shared));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) FrontWithoutKernel(FrontWithoutArgs<T> args) {
  FrontWithoutBody(CudaGrid(), args);
}

// Opts a kernel in to the device's largest shared memory, once per device and kernel, at its first
// launch (a warm-up, before any graph capture: the engine runs a slice op by op before it captures
// it).
const char* OptIn(const void* kernel) {
  static std::mutex mutex;
  static std::set<std::pair<int, const void*>>* done =
      new std::set<std::pair<int, const void*>>();  // never destroyed: used until exit
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return cudaGetErrorString(e);
  const std::lock_guard<std::mutex> lock(mutex);
  if (done->count({device, kernel}) > 0) return nullptr;
  const int64_t most = MaxSharedBytesOptIn(device);
  if (most < 0) return "the CUDA runtime cannot say how much shared memory a thread block may use";
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most));
      e != cudaSuccess) {
    return cudaGetErrorString(e);
  }
  done->insert({device, kernel});
  return nullptr;
}

template <typename Kernel, typename Args>
const char* Launch(Kernel kernel, const Args& args, size_t shared_bytes, CUstream_st* stream) {
  if (const char* error = OptIn(reinterpret_cast<const void*>(kernel)); error != nullptr) return error;
  kernel<<<static_cast<unsigned>(args.shape.heads), kThreads, shared_bytes, stream>>>(args);
  return LaunchError();
}

}  // namespace

int64_t MaxSharedBytesOptIn(int device) {
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();  // consume the error, so that the next launch's check does not report it
    return -1;
  }
  return bytes;
}

template <typename T>
const char* LaunchPrefixForward(const PrefixForwardArgs<T>& args, CUstream_st* stream) {
  return Launch(PrefixForwardKernel<T>, args, SharedElements(args.shape, 1) * sizeof(T), stream);
}

template <typename T>
const char* LaunchPrefixBackward(const PrefixBackwardArgs<T>& args, CUstream_st* stream) {
  return Launch(PrefixBackwardKernel<T>, args, SharedElements(args.shape, 2) * sizeof(T), stream);
}

template <typename T>
const char* LaunchFrontWithout(const FrontWithoutArgs<T>& args, CUstream_st* stream) {
  const int64_t entries = args.shape.heads * args.shape.features * (args.shape.dim + 1);
  FrontWithoutKernel<T><<<GridBlocks(entries), kThreads, 0, stream>>>(args);
  return LaunchError();
}

template const char* LaunchPrefixForward<float>(const PrefixForwardArgs<float>&, CUstream_st*);
template const char* LaunchPrefixForward<double>(const PrefixForwardArgs<double>&, CUstream_st*);
template const char* LaunchPrefixBackward<float>(const PrefixBackwardArgs<float>&, CUstream_st*);
template const char* LaunchPrefixBackward<double>(const PrefixBackwardArgs<double>&, CUstream_st*);
template const char* LaunchFrontWithout<float>(const FrontWithoutArgs<float>&, CUstream_st*);
template const char* LaunchFrontWithout<double>(const FrontWithoutArgs<double>&, CUstream_st*);

}  // namespace slimfit::performer::cuda_kernels
