// The CUDA row kernels of a Performer layer's hand-written forward and backward (explicit_backprop.h):
// the token embedding, the heads' split with an elementwise feature map, its gradient's join, the
// attention normalisation both ways, post-LN's LayerNorm with its residual, bias gradients and
// LayerNorm's backward with its parameters' gradients, each one kernel where LibTorch's form takes
// two to six launches. The
// ATen face of layer_kernels_cuda_kernels.h; the CPU's counterparts are layer_kernels_cpu.h, with
// the same signatures and equations.
//
// Built by the CUDA build only and off by default (fused_cuda_kernels.h); their bodies are tested
// on the CPU through an emulated thread block in every build (layer_kernels_cuda_test.cc).
// REQUIRES for every function: LayerKernelsCudaApply of its tensors, shapes as stated in
// layer_kernels_cpu.h (checked: a mismatch is a c10::Error), an elementwise feature map (relu,
// elu+1, sqr; FAVOR+ is a c10::Error). Outputs are written by the kernels on the current stream.
// Thread safety: pure functions of their arguments.
#ifndef SLIMFIT_PERFORMER_LAYER_KERNELS_CUDA_H_
#define SLIMFIT_PERFORMER_LAYER_KERNELS_CUDA_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <initializer_list>

#include "performer/fused_cuda_kernels.h"
#include "performer/layer_kernels_cuda_kernels.h"
#include "performer/model_config.h"

namespace slimfit::performer {

// FusedCudaKernelsEnabled(), and every tensor a contiguous CUDA tensor of one float32 or float64
// dtype on one device.
bool LayerKernelsCudaApply(std::initializer_list<const at::Tensor*> tensors);

// The token embedding with its positional features; tokens and positions are contiguous int64 on
// x0's device (not part of LayerKernelsCudaApply: they are not floats).
void EmbedCuda(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& embedding,
               const at::Tensor& frequencies, at::Tensor& x0);
void SplitHeadsCuda(FeatureMap map, const at::Tensor& qkv, int64_t heads, at::Tensor& phi, at::Tensor& v);
void JoinHeadGradientsCuda(FeatureMap map, const at::Tensor& qkv, const at::Tensor& g_phi_q,
                           const at::Tensor& g_phi_k, const at::Tensor& g_v, at::Tensor& g_qkv);
void NormalizeAttentionCuda(const at::Tensor& num, const at::Tensor& den, double eps, at::Tensor& den_eps,
                            at::Tensor& attention);
void NormalizeAttentionBackwardCuda(const at::Tensor& g_attention, const at::Tensor& attention,
                                    const at::Tensor& den_eps, at::Tensor& g_num, at::Tensor& g_den);
// One thread per column / per row and column: for the few rows of a slice (at thousands of rows
// LibTorch's reductions are faster; explicit_backprop.cc calls these below 512).
void AddColumnSumsCuda(at::Tensor& sink, const at::Tensor& g);
// y = LayerNorm(x)·weight + bias + residual, mean and rstd [rows, 1] (post-LN's residual connection).
void LayerNormAddCuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                      const at::Tensor& residual, at::Tensor& y, at::Tensor& mean, at::Tensor& rstd);
void LayerNormBackwardCuda(const at::Tensor& g, const at::Tensor& x, const at::Tensor& mean,
                           const at::Tensor& rstd, const at::Tensor& weight, at::Tensor& g_x,
                           at::Tensor& sink_weight, at::Tensor& sink_bias);

namespace internal {

// The kernels' arguments for these tensors, shapes checked (device agnostic: the CPU test runs the
// bodies on CPU tensors). REQUIRES: contiguous tensors of dtype T.
template <typename T>
cuda_kernels::SplitHeadsArgs<T> SplitHeadsArgsOf(FeatureMap map, const at::Tensor& qkv, int64_t heads,
                                                 at::Tensor& phi, at::Tensor& v);
template <typename T>
cuda_kernels::JoinHeadGradientsArgs<T> JoinHeadGradientsArgsOf(FeatureMap map, const at::Tensor& qkv,
                                                               const at::Tensor& g_phi_q,
                                                               const at::Tensor& g_phi_k,
                                                               const at::Tensor& g_v, at::Tensor& g_qkv);
template <typename T>
cuda_kernels::NormalizeAttentionArgs<T> NormalizeAttentionArgsOf(const at::Tensor& num, const at::Tensor& den,
                                                                 double eps, at::Tensor& den_eps,
                                                                 at::Tensor& attention);
template <typename T>
cuda_kernels::NormalizeAttentionBackwardArgs<T> NormalizeAttentionBackwardArgsOf(
    const at::Tensor& g_attention, const at::Tensor& attention, const at::Tensor& den_eps, at::Tensor& g_num,
    at::Tensor& g_den);

template <typename T>
cuda_kernels::EmbedArgs<T> EmbedArgsOf(const at::Tensor& tokens, const at::Tensor& positions,
                                       const at::Tensor& embedding, const at::Tensor& frequencies,
                                       at::Tensor& x0);
template <typename T>
cuda_kernels::LayerNormAddArgs<T> LayerNormAddArgsOf(const at::Tensor& x, const at::Tensor& weight,
                                                     const at::Tensor& bias, double eps,
                                                     const at::Tensor& residual, at::Tensor& y,
                                                     at::Tensor& mean, at::Tensor& rstd);
template <typename T>
cuda_kernels::AddColumnSumsArgs<T> AddColumnSumsArgsOf(at::Tensor& sink, const at::Tensor& g);
template <typename T>
cuda_kernels::LayerNormBackwardArgs<T> LayerNormBackwardArgsOf(const at::Tensor& g, const at::Tensor& x,
                                                               const at::Tensor& mean, const at::Tensor& rstd,
                                                               const at::Tensor& weight, at::Tensor& g_x,
                                                               at::Tensor& sink_weight,
                                                               at::Tensor& sink_bias);

}  // namespace internal
}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_LAYER_KERNELS_CUDA_H_
