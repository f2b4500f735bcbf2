// Row-wise pieces of a Performer layer's hand-written forward and backward (explicit_backprop.h) as
// CUDA kernels over raw contiguous buffers, one launch each where LibTorch takes two to five: the
// token embedding with its positional features, the heads' split with the feature map, its
// gradient's join, the attention normalisation both ways, post-LN's LayerNorm with its residual, a
// bias's gradient (column sums added into it) and LayerNorm's backward with its parameters'
// gradients added in. The same pieces the CPU's row kernels are (layer_kernels_cpu.h), with the same
// equations.
//
// This header is plain C++: it declares the launchers (defined in layer_kernels_cuda_kernels.cu,
// compiled by nvcc in the CUDA build only) and holds the kernels' bodies as templates over a `Grid`
// parameter — Index() (this thread's index among all of the launch's threads) and Count() (their
// number) — so that nvcc's kernels and a host emulation (emulated_thread_block.h) run the same
// code. Every body is a grid-stride loop over its outputs, each written by one thread; no body
// needs a sync. layer_kernels_cuda.h is the ATen-facing wrapper; call that, not these.
//
// Shapes (contiguous): S rows, d = k·h values per row (k heads of h); qkv [S, 3d] (q | k | v),
// φ [2, k, S, h], v and numerators [k, S, h], denominators [k, S], attention [S, d].
// Thread safety: launches are asynchronous on the given stream (buffers as in
// prefix_attention_cuda_kernels.h).
#ifndef SLIMFIT_PERFORMER_LAYER_KERNELS_CUDA_KERNELS_H_
#define SLIMFIT_PERFORMER_LAYER_KERNELS_CUDA_KERNELS_H_

#include <cmath>
#include <cstdint>

#include "performer/prefix_attention_kernel_bodies.h"  // SLIMFIT_KERNEL_DEVICE, SLIMFIT_KERNEL_HOST_DEVICE

struct CUstream_st;

namespace slimfit::performer::cuda_kernels {

// The elementwise feature maps (FAVOR+ is a product, not a row kernel).
enum class RowFeature : int { kRelu = 0, kElu1 = 1, kSqr = 2 };

struct RowShape {
  int64_t rows = 0, heads = 0, head_dim = 0;
  SLIMFIT_KERNEL_HOST_DEVICE int64_t Width() const { return heads * head_dim; }  // d
};

template <typename T>
struct SplitHeadsArgs {
  RowShape shape;
  RowFeature feature = RowFeature::kSqr;
  const T* qkv = nullptr;  // [S, 3d]
  T* phi = nullptr;        // [2, k, S, h]: φ(q), φ(k)
  T* v = nullptr;          // [k, S, h]
};

template <typename T>
struct JoinHeadGradientsArgs {
  RowShape shape;
  RowFeature feature = RowFeature::kSqr;
  const T* qkv = nullptr;                                          // [S, 3d], the forward's input
  const T *g_phi_q = nullptr, *g_phi_k = nullptr, *g_v = nullptr;  // [k, S, h] each
  T* g_qkv = nullptr;                                              // [S, 3d]
};

template <typename T>
struct NormalizeAttentionArgs {
  RowShape shape;
  T eps = 0;
  const T* numerator = nullptr;    // [k, S, h]
  const T* denominator = nullptr;  // [k, S]
  T* denominator_eps = nullptr;    // [k, S]: denominator + ε
  T* attention = nullptr;          // [S, d]: numerator / (denominator + ε), heads joined
};

template <typename T>
struct NormalizeAttentionBackwardArgs {
  RowShape shape;
  const T* g_attention = nullptr;      // [S, d]
  const T* attention = nullptr;        // [S, d]
  const T* denominator_eps = nullptr;  // [k, S]
  T* g_numerator = nullptr;            // [k, S, h]: g_attention / (denominator + ε)
  T* g_denominator = nullptr;          // [k, S]:    −Σ_c g_numerator · attention
};

// x0 [rows, d] = [E(token) (d/2) | sin(position·f) (d/4) | cos(position·f) (d/4)]
// (performer_model.h's EmbedTokens). A token outside [0, vocab) — refused before any gradient
// (packed_batch.h) — gives a row of NaN, never a read outside E.
template <typename T>
struct EmbedArgs {
  int64_t rows = 0, d = 0, vocab = 0;
  const int64_t* tokens = nullptr;     // [rows]
  const int64_t* positions = nullptr;  // [rows]
  const T* embedding = nullptr;        // [vocab, d/2]
  const T* frequencies = nullptr;      // [d/4]
  T* x0 = nullptr;                     // [rows, d]
};

// y = LayerNorm(x)·weight + bias + residual over rows of n values, with the rows' mean and
// 1/sqrt(var + ε) (LibTorch's native_layer_norm layout, [rows, 1]): post-LN's normalisation and its
// residual connection in one pass.
template <typename T>
struct LayerNormAddArgs {
  int64_t rows = 0, n = 0;
  T eps = 0;
  const T *x = nullptr, *weight = nullptr, *bias = nullptr, *residual = nullptr;
  T *y = nullptr, *mean = nullptr, *rstd = nullptr;
};

// sink[c] += Σ_r g[r, c]: a bias's gradient. g [rows, n], sink [n].
template <typename T>
struct AddColumnSumsArgs {
  int64_t rows = 0, n = 0;
  const T* g = nullptr;
  T* sink = nullptr;
};

// LayerNorm's backward over rows of n values (LibTorch's native_layer_norm_backward), the weight's
// and bias's gradients added into sinks: x̂ = (x − mean)·rstd, g_x = rstd·(g·w − (Σ g·w + x̂·Σ g·w·x̂)/n),
// sink_weight += Σ_rows g·x̂, sink_bias += Σ_rows g.
template <typename T>
struct LayerNormBackwardArgs {
  int64_t rows = 0, n = 0;
  const T* g = nullptr;       // [rows, n]
  const T* x = nullptr;       // [rows, n]
  const T* mean = nullptr;    // [rows]
  const T* rstd = nullptr;    // [rows]
  const T* weight = nullptr;  // [n]
  T* g_x = nullptr;           // [rows, n]
  T* sink_weight = nullptr;   // [n]
  T* sink_bias = nullptr;     // [n]
};

// φ(x), as layer_kernels_cpu.cc's FeatureRow (and LibTorch's relu, elu + 1, x·x).
template <typename T>
SLIMFIT_KERNEL_DEVICE T FeatureOf(RowFeature f, T x) {
  switch (f) {
    case RowFeature::kRelu:
      return x > 0 ? x : T(0);
    case RowFeature::kElu1:
      return x > 0 ? x + T(1) : std::expm1(x) + T(1);
    case RowFeature::kSqr:
      return x * x;
  }
  return x;
}

// ∂φ/∂x · g, as FeatureGradientRow.
template <typename T>
SLIMFIT_KERNEL_DEVICE T FeatureGradientOf(RowFeature f, T x, T g) {
  switch (f) {
    case RowFeature::kRelu:
      return x > 0 ? g : T(0);
    case RowFeature::kElu1:
      return x > 0 ? g : g * std::exp(x);
    case RowFeature::kSqr:
      return T(2) * (x * g);
  }
  return g;
}

// Where element (row i, column j) of qkv [S, 3d] goes: section 0/1/2 (q, k, v) and its offset in a
// [k, S, h] tensor.
struct HeadPlace {
  int64_t section, offset;
};
SLIMFIT_KERNEL_HOST_DEVICE inline HeadPlace PlaceOf(const RowShape& s, int64_t i, int64_t j) {
  const int64_t d = s.Width();
  const int64_t section = j / d, within = j % d;
  const int64_t head = within / s.head_dim, c = within % s.head_dim;
  return HeadPlace{section, (head * s.rows + i) * s.head_dim + c};
}

template <typename T, typename Grid>
SLIMFIT_KERNEL_DEVICE void SplitHeadsBody(const Grid& g, const SplitHeadsArgs<T>& a) {
  const int64_t width = 3 * a.shape.Width(), heads_size = a.shape.rows * a.shape.Width();
  for (int64_t e = g.Index(); e < a.shape.rows * width; e += g.Count()) {
    const HeadPlace p = PlaceOf(a.shape, e / width, e % width);
    const T x = a.qkv[e];
    if (p.section < 2) {
      a.phi[p.section * heads_size + p.offset] = FeatureOf(a.feature, x);
    } else {
      a.v[p.offset] = x;
    }
  }
}

template <typename T, typename Grid>
SLIMFIT_KERNEL_DEVICE void JoinHeadGradientsBody(const Grid& g, const JoinHeadGradientsArgs<T>& a) {
  const int64_t width = 3 * a.shape.Width();
  for (int64_t e = g.Index(); e < a.shape.rows * width; e += g.Count()) {
    const HeadPlace p = PlaceOf(a.shape, e / width, e % width);
    if (p.section == 2) {
      a.g_qkv[e] = a.g_v[p.offset];
    } else {
      const T* g_phi = p.section == 0 ? a.g_phi_q : a.g_phi_k;
      a.g_qkv[e] = FeatureGradientOf(a.feature, a.qkv[e], g_phi[p.offset]);
    }
  }
}

// One thread per numerator entry (h, i, c); the c = 0 thread of a row also writes den + ε.
template <typename T, typename Grid>
SLIMFIT_KERNEL_DEVICE void NormalizeAttentionBody(const Grid& g, const NormalizeAttentionArgs<T>& a) {
  const int64_t S = a.shape.rows, h = a.shape.head_dim, d = a.shape.Width();
  for (int64_t e = g.Index(); e < a.shape.heads * S * h; e += g.Count()) {
    const int64_t head = e / (S * h), i = (e / h) % S, c = e % h;
    const T den = a.denominator[head * S + i] + a.eps;
    a.attention[i * d + head * h + c] = a.numerator[e] / den;
    if (c == 0) a.denominator_eps[head * S + i] = den;
  }
}

// One thread per row of a head (h, i): its h numerator gradients and their sum into g_den.
template <typename T, typename Grid>
SLIMFIT_KERNEL_DEVICE void NormalizeAttentionBackwardBody(const Grid& g,
                                                          const NormalizeAttentionBackwardArgs<T>& a) {
  const int64_t S = a.shape.rows, h = a.shape.head_dim, d = a.shape.Width();
  for (int64_t r = g.Index(); r < a.shape.heads * S; r += g.Count()) {
    const int64_t head = r / S, i = r % S;
    const T den = a.denominator_eps[r];
    T sum = 0;
    for (int64_t c = 0; c < h; ++c) {
      const T gn = a.g_attention[i * d + head * h + c] / den;
      a.g_numerator[r * h + c] = gn;
      sum += gn * a.attention[i * d + head * h + c];
    }
    a.g_denominator[r] = -sum;
  }
}

// One thread per entry of x0.
template <typename T, typename Grid>
SLIMFIT_KERNEL_DEVICE void EmbedBody(const Grid& g, const EmbedArgs<T>& a) {
  const int64_t half = a.d / 2, quarter = a.d / 4;
  for (int64_t e = g.Index(); e < a.rows * a.d; e += g.Count()) {
    const int64_t row = e / a.d, j = e % a.d;
    if (j < half) {
      const int64_t token = a.tokens[row];
      a.x0[e] = token >= 0 && token < a.vocab ? a.embedding[token * half + j] : static_cast<T>(NAN);
    } else {
      const int64_t i = (j - half) % quarter;
      const T angle = static_cast<T>(a.positions[row]) * a.frequencies[i];
      a.x0[e] = j < half + quarter ? std::sin(angle) : std::cos(angle);
    }
  }
}

// One thread per row: the mean, then the variance about it, then the row.
template <typename T, typename Grid>
SLIMFIT_KERNEL_DEVICE void LayerNormAddBody(const Grid& g, const LayerNormAddArgs<T>& a) {
  const int64_t n = a.n;
  for (int64_t r = g.Index(); r < a.rows; r += g.Count()) {
    const T* x = a.x + r * n;
    T sum = 0;
    for (int64_t c = 0; c < n; ++c) sum += x[c];
    const T mean = sum / static_cast<T>(n);
    T squares = 0;
    for (int64_t c = 0; c < n; ++c) squares += (x[c] - mean) * (x[c] - mean);
    const T rstd = T(1) / std::sqrt(squares / static_cast<T>(n) + a.eps);
    for (int64_t c = 0; c < n; ++c) {
      a.y[r * n + c] = (x[c] - mean) * rstd * a.weight[c] + a.bias[c] + a.residual[r * n + c];
    }
    a.mean[r] = mean;
    a.rstd[r] = rstd;
  }
}

// One thread per column.
template <typename T, typename Grid>
SLIMFIT_KERNEL_DEVICE void AddColumnSumsBody(const Grid& g, const AddColumnSumsArgs<T>& a) {
  for (int64_t c = g.Index(); c < a.n; c += g.Count()) {
    T sum = 0;
    for (int64_t r = 0; r < a.rows; ++r) sum += a.g[r * a.n + c];
    a.sink[c] += sum;
  }
}

// Tasks 0 … rows − 1 are rows (g_x), tasks rows … rows + n − 1 columns (the sinks): the two read
// only the inputs, so one launch does both without a sync.
template <typename T, typename Grid>
SLIMFIT_KERNEL_DEVICE void LayerNormBackwardBody(const Grid& g, const LayerNormBackwardArgs<T>& a) {
  const int64_t n = a.n;
  for (int64_t task = g.Index(); task < a.rows + n; task += g.Count()) {
    if (task < a.rows) {
      const int64_t r = task;
      const T mean = a.mean[r], rstd = a.rstd[r];
      const T* gr = a.g + r * n;
      const T* xr = a.x + r * n;
      T sum_gw = 0, sum_gwx = 0;
      for (int64_t c = 0; c < n; ++c) {
        const T gw = gr[c] * a.weight[c];
        sum_gw += gw;
        sum_gwx += gw * ((xr[c] - mean) * rstd);
      }
      for (int64_t c = 0; c < n; ++c) {
        const T x_hat = (xr[c] - mean) * rstd;
        a.g_x[r * n + c] = rstd * (gr[c] * a.weight[c] - (sum_gw + x_hat * sum_gwx) / static_cast<T>(n));
      }
    } else {
      const int64_t c = task - a.rows;
      T sum_w = 0, sum_b = 0;
      for (int64_t r = 0; r < a.rows; ++r) {
        const T gv = a.g[r * n + c];
        sum_w += gv * ((a.x[r * n + c] - a.mean[r]) * a.rstd[r]);
        sum_b += gv;
      }
      a.sink_weight[c] += sum_w;
      a.sink_bias[c] += sum_b;
    }
  }
}

// Enqueue on `stream`; null when the launch was accepted, else the CUDA runtime's error text.
template <typename T>
const char* LaunchSplitHeads(const SplitHeadsArgs<T>& args, CUstream_st* stream);
template <typename T>
const char* LaunchJoinHeadGradients(const JoinHeadGradientsArgs<T>& args, CUstream_st* stream);
template <typename T>
const char* LaunchNormalizeAttention(const NormalizeAttentionArgs<T>& args, CUstream_st* stream);
template <typename T>
const char* LaunchNormalizeAttentionBackward(const NormalizeAttentionBackwardArgs<T>& args,
                                             CUstream_st* stream);
template <typename T>
const char* LaunchEmbed(const EmbedArgs<T>& args, CUstream_st* stream);
template <typename T>
const char* LaunchLayerNormAdd(const LayerNormAddArgs<T>& args, CUstream_st* stream);
template <typename T>
const char* LaunchAddColumnSums(const AddColumnSumsArgs<T>& args, CUstream_st* stream);
template <typename T>
const char* LaunchLayerNormBackward(const LayerNormBackwardArgs<T>& args, CUstream_st* stream);

}  // namespace slimfit::performer::cuda_kernels

#endif  // SLIMFIT_PERFORMER_LAYER_KERNELS_CUDA_KERNELS_H_
