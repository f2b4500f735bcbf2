// The row kernels of layer_kernels_cuda_kernels.h (which holds their bodies) as CUDA launches.
#include <cuda_runtime.h>

#include "performer/cuda_kernel_launch.cuh"
#include "performer/layer_kernels_cuda_kernels.h"

namespace slimfit::performer::cuda_kernels {
namespace {

template <typename T>
__global__ void __launch_bounds__(kThreads) SplitHeadsKernel(SplitHeadsArgs<T> args) {
  SplitHeadsBody(CudaGrid(), args);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) JoinHeadGradientsKernel(JoinHeadGradientsArgs<T> args) {
  JoinHeadGradientsBody(CudaGrid(), args);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) NormalizeAttentionKernel(NormalizeAttentionArgs<T> args) {
  NormalizeAttentionBody(CudaGrid(), args);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    NormalizeAttentionBackwardKernel(NormalizeAttentionBackwardArgs<T> args) {
  NormalizeAttentionBackwardBody(CudaGrid(), args);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) EmbedKernel(EmbedArgs<T> args) {
  EmbedBody(CudaGrid(), args);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) LayerNormAddKernel(LayerNormAddArgs<T> args) {
  LayerNormAddBody(CudaGrid(), args);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) AddColumnSumsKernel(AddColumnSumsArgs<T> args) {
  AddColumnSumsBody(CudaGrid(), args);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) LayerNormBackwardKernel(LayerNormBackwardArgs<T> args) {
  LayerNormBackwardBody(CudaGrid(), args);
}

}  // namespace

template <typename T>
const char* LaunchEmbed(const EmbedArgs<T>& args, CUstream_st* stream) {
  EmbedKernel<T><<<GridBlocks(args.rows * args.d), kThreads, 0, stream>>>(args);
  return LaunchError();
}

template <typename T>
const char* LaunchLayerNormAdd(const LayerNormAddArgs<T>& args, CUstream_st* stream) {
  LayerNormAddKernel<T><<<GridBlocks(args.rows), kThreads, 0, stream>>>(args);
  return LaunchError();
}

template <typename T>
const char* LaunchAddColumnSums(const AddColumnSumsArgs<T>& args, CUstream_st* stream) {
  AddColumnSumsKernel<T><<<GridBlocks(args.n), kThreads, 0, stream>>>(args);
  return LaunchError();
}

template <typename T>
const char* LaunchLayerNormBackward(const LayerNormBackwardArgs<T>& args, CUstream_st* stream) {
  LayerNormBackwardKernel<T><<<GridBlocks(args.rows + args.n), kThreads, 0, stream>>>(args);
  return LaunchError();
}

template <typename T>
const char* LaunchSplitHeads(const SplitHeadsArgs<T>& args, CUstream_st* stream) {
  SplitHeadsKernel<T><<<GridBlocks(args.shape.rows * 3 * args.shape.Width()), kThreads, 0, stream>>>(args);
  return LaunchError();
}

template <typename T>
const char* LaunchJoinHeadGradients(const JoinHeadGradientsArgs<T>& args, CUstream_st* stream) {
  JoinHeadGradientsKernel<T>
      <<<GridBlocks(args.shape.rows * 3 * args.shape.Width()), kThreads, 0, stream>>>(args);
  return LaunchError();
}

template <typename T>
const char* LaunchNormalizeAttention(const NormalizeAttentionArgs<T>& args, CUstream_st* stream) {
  NormalizeAttentionKernel<T>
      <<<GridBlocks(args.shape.rows * args.shape.Width()), kThreads, 0, stream>>>(args);
  return LaunchError();
}

template <typename T>
const char* LaunchNormalizeAttentionBackward(const NormalizeAttentionBackwardArgs<T>& args,
                                             CUstream_st* stream) {
  NormalizeAttentionBackwardKernel<T>
      <<<GridBlocks(args.shape.rows * args.shape.heads), kThreads, 0, stream>>>(args);
  return LaunchError();
}

#define SLIMFIT_INSTANTIATE(T)                                                                       \
  template const char* LaunchSplitHeads<T>(const SplitHeadsArgs<T>&, CUstream_st*);                  \
  template const char* LaunchJoinHeadGradients<T>(const JoinHeadGradientsArgs<T>&, CUstream_st*);    \
  template const char* LaunchNormalizeAttention<T>(const NormalizeAttentionArgs<T>&, CUstream_st*);  \
  template const char* LaunchNormalizeAttentionBackward<T>(const NormalizeAttentionBackwardArgs<T>&, \
                                                           CUstream_st*);                            \
  template const char* LaunchEmbed<T>(const EmbedArgs<T>&, CUstream_st*);                            \
  template const char* LaunchLayerNormAdd<T>(const LayerNormAddArgs<T>&, CUstream_st*);              \
  template const char* LaunchAddColumnSums<T>(const AddColumnSumsArgs<T>&, CUstream_st*);            \
  template const char* LaunchLayerNormBackward<T>(const LayerNormBackwardArgs<T>&, CUstream_st*);
SLIMFIT_INSTANTIATE(float)
SLIMFIT_INSTANTIATE(double)
#undef SLIMFIT_INSTANTIATE

}  // namespace slimfit::performer::cuda_kernels
