// Float32 CPU kernels for the row-wise pieces of a Performer layer's hand-written forward and
// backward (explicit_backprop.h): plain loops over contiguous buffers, each replacing a sequence of
// LibTorch calls (views, allocations, an element-wise kernel each) that at the row counts of small
// slices cost more than their arithmetic.
//
// Each kernel computes what the LibTorch form beside it in explicit_backprop.cc computes, to float32
// rounding: GELU uses the same erf approximation as LibTorch's vectorised CPU kernels (Abramowitz
// and Stegun 7.1.26, |error| ≤ 1.5e-7) with a Cody–Waite exp, so the loops vectorise.
//
// Shapes: S rows, d = d_model, k heads of h = d / k values; feature maps relu, elu+1 and sqr (M = h).
// REQUIRES for every function: LayerKernelsApply(t) for each tensor argument, shapes as stated
// (checked: a mismatch is a c10::Error). Outputs are written through raw pointers.
// Thread safety: pure functions of their arguments; parallel over rows on LibTorch's OpenMP team
// where the work is large enough.
#ifndef SLIMFIT_PERFORMER_LAYER_KERNELS_CPU_H_
#define SLIMFIT_PERFORMER_LAYER_KERNELS_CPU_H_

#include <ATen/ATen.h>

#include "performer/model_config.h"

namespace slimfit::performer {

// float32, on the CPU, contiguous.
bool LayerKernelsApply(const at::Tensor& t);

// x0 [S, d] = [E(token) (d/2) | sin(pos·f) (d/4) | cos(pos·f) (d/4)] (performer_model.h's
// EmbedTokens): tokens and positions int64 [S] (contiguous, on the CPU), embedding [vocab, d/2],
// frequencies [d/4]. A token outside [0, vocab) is a c10::Error.
void EmbedCpu(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& embedding,
              const at::Tensor& frequencies, at::Tensor& x0);

// Its backward: sink[token] += g_x0[row, 0 : d/2] for every row (rows of a repeated token add up).
void EmbedBackwardCpu(const at::Tensor& tokens, const at::Tensor& g_x0, at::Tensor& sink);

// sink[c] += Σ_r g[r, c]: a bias's gradient. sink [n], g [S, n].
void AddColumnSumsCpu(at::Tensor& sink, const at::Tensor& g);

// From qkv [S, 3d] (q | k | v): φ(q), φ(k) into phi [2, k, S, h] and v into v [k, S, h].
void SplitHeadsCpu(FeatureMap map, const at::Tensor& qkv, int64_t heads, at::Tensor& phi, at::Tensor& v);

// The gradient of qkv [S, 3d] given those of φq, φk [k, S, h] and v [k, S, h].
void JoinHeadGradientsCpu(FeatureMap map, const at::Tensor& qkv, const at::Tensor& g_phi_q,
                          const at::Tensor& g_phi_k, const at::Tensor& g_v, at::Tensor& g_qkv);

// den_eps = den + ε [k, S]; attention [S, d] = num [k, S, h] / den_eps, heads joined.
void NormalizeAttentionCpu(const at::Tensor& num, const at::Tensor& den, double eps, at::Tensor& den_eps,
                           at::Tensor& attention);

// Its backward: g_num [k, S, h] = g_attention / den_eps, g_den [k, S] = −Σ g_num · attention.
void NormalizeAttentionBackwardCpu(const at::Tensor& g_attention, const at::Tensor& attention,
                                   const at::Tensor& den_eps, at::Tensor& g_num, at::Tensor& g_den);

// LayerNorm over the last dimension of x [S, n] with weight and bias [n]: y [S, n], and the rows'
// mean and 1/sqrt(var + eps), each [S, 1] (LibTorch's native_layer_norm layout).
void LayerNormCpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                  at::Tensor& y, at::Tensor& mean, at::Tensor& rstd);

// Its backward: g_x [S, n] from g [S, n]; the weight's and bias's gradients are added into
// sink_weight and sink_bias [n].
void LayerNormBackwardCpu(const at::Tensor& g, const at::Tensor& x, const at::Tensor& mean,
                          const at::Tensor& rstd, const at::Tensor& weight, at::Tensor& g_x,
                          at::Tensor& sink_weight, at::Tensor& sink_bias);

// Σ_p cross-entropy of logits [P, V] against targets (int64 [P], in [0, V)): turns `logits` into
// log-probabilities in place and returns the sum (accumulated in double).
double LogSoftmaxCrossEntropyCpu(at::Tensor& logits, const at::Tensor& targets);

// Its gradient scaled by `scale`: g_logits [P, V] = scale · (exp(log_probs) − one_hot(targets)).
void LogSoftmaxCrossEntropyBackwardCpu(const at::Tensor& log_probs, const at::Tensor& targets, float scale,
                                       at::Tensor& g_logits);

// target[rows[i]] += source[i] for every i: rows int64 [P] in [0, target rows), source [P, n],
// target [S, n].
void AddRowsCpu(const at::Tensor& rows, const at::Tensor& source, at::Tensor& target);

// hidden = u · Φ(u) (exact GELU), same shape.
void GeluCpu(const at::Tensor& u, at::Tensor& hidden);

// g_u = g_hidden · (Φ(u) + u · φ(u)).
void GeluBackwardCpu(const at::Tensor& g_hidden, const at::Tensor& u, at::Tensor& g_u);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_LAYER_KERNELS_CPU_H_
