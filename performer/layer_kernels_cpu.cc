#include "performer/layer_kernels_cpu.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace slimfit::performer {
namespace {

// Below this many values per call a kernel runs on the calling thread: a parallel region costs
// microseconds, the loops of a small slice about as much.
constexpr int64_t kParallelValues = 32768;

int64_t RowGrain(int64_t values_per_row) {
  return std::max<int64_t>(1, kParallelValues / std::max<int64_t>(1, values_per_row));
}

void Check(bool ok, const char* what) { TORCH_CHECK(ok, "layer kernels: ", what); }

void CheckFloat(const at::Tensor& t, const char* name) {
  TORCH_CHECK(LayerKernelsApply(t), "layer kernels: ", name, " must be a contiguous float32 CPU tensor");
}

// exp(x) for x in float range: 2ⁿ·exp(r) with n = round(x·log₂e) and r = x − n·ln 2 in two parts
// (Cody–Waite), exp(r) by Cephes' degree-6 polynomial (expf's, ~1 ulp). Branch-free, so loops of it
// vectorise.
inline float Exp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  // n from a NaN-free copy (converting NaN to an integer is undefined); a NaN x still gives NaN.
  const float finite = x == x ? x : 0.0f;
  constexpr float kRound = 12582912.0f;  // 1.5·2²³: adding and subtracting it rounds to an integer
  const float n = (finite * 1.44269504088896341f + kRound) - kRound;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// erf(x) by Abramowitz and Stegun 7.1.26, as LibTorch's vectorised CPU kernels compute it.
inline float Erf(float x) {
  const float a = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * Exp(-a * a);
  return std::copysign(y, x);
}

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// The element loops below are compiled for AVX-512 and AVX2 besides the baseline, the version run
// chosen by the CPU at load time (GCC's function multi-versioning); LibTorch's own kernels choose
// theirs the same way. The library is built with -ffp-contract=off (GCC would otherwise fuse
// multiplies and adds into FMA in the AVX-512 version only), so every version rounds alike.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define SLIMFIT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SLIMFIT_VECTOR_CLONES
#endif

SLIMFIT_VECTOR_CLONES void GeluRange(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * in[i] * (1.0f + Erf(in[i] * kSqrtHalf));
}

SLIMFIT_VECTOR_CLONES void GeluBackwardRange(const float* g, const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float cdf = 0.5f * (1.0f + Erf(x * kSqrtHalf));
    const float pdf = kInvSqrt2Pi * Exp(-0.5f * x * x);
    out[i] = g[i] * (cdf + x * pdf);
  }
}

// log-probabilities of one row of logits, in place; returns log Σ exp.
SLIMFIT_VECTOR_CLONES float LogSoftmaxRow(float* x, int64_t n) {
  float top = x[0];
  for (int64_t i = 1; i < n; ++i) top = x[i] > top ? x[i] : top;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += Exp(x[i] - top);
  const float log_sum = top + std::log(sum);
  for (int64_t i = 0; i < n; ++i) x[i] -= log_sum;
  return log_sum;
}

SLIMFIT_VECTOR_CLONES void SoftmaxRow(const float* log_probs, float scale, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = scale * Exp(log_probs[i]);
}

// One row of LayerNorm: y = (x − mean) · rstd · w + b; returns mean and rstd. Float sums in
// vector lanes (omp simd reductions), as LibTorch's kernel sums in float.
SLIMFIT_VECTOR_CLONES void LayerNormRow(const float* x, const float* w, const float* b, float eps, int64_t n,
                                        float* y, float* mean, float* rstd) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < n; ++c) sum += x[c];
  const float m = sum / static_cast<float>(n);
  float squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < n; ++c) squares += (x[c] - m) * (x[c] - m);
  const float inv = 1.0f / std::sqrt(squares / static_cast<float>(n) + eps);
  for (int64_t c = 0; c < n; ++c) y[c] = (x[c] - m) * inv * w[c] + b[c];
  *mean = m;
  *rstd = inv;
}

// One row of its backward: dx = rstd · (dx̂ − mean(dx̂) − x̂ · mean(dx̂ · x̂)), dx̂ = g · w.
SLIMFIT_VECTOR_CLONES void LayerNormBackwardRow(const float* g, const float* x, const float* w, float m,
                                                float inv, int64_t n, float* out) {
  float sum_dxhat = 0, sum_dxhat_xhat = 0;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
  for (int64_t c = 0; c < n; ++c) {
    const float dxhat = g[c] * w[c];
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * ((x[c] - m) * inv);
  }
  const float a = sum_dxhat / static_cast<float>(n), b = sum_dxhat_xhat / static_cast<float>(n);
  for (int64_t c = 0; c < n; ++c) out[c] = inv * (g[c] * w[c] - a - ((x[c] - m) * inv) * b);
}

// φ and its derivative along one row of h values; a template per map so the loops have no branch
// on the map (and vectorise where the map allows).
template <FeatureMap kMap>
void FeatureRow(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (kMap == FeatureMap::kRelu) y[i] = x[i] > 0 ? x[i] : 0.0f;
    if constexpr (kMap == FeatureMap::kElu1) y[i] = x[i] > 0 ? x[i] + 1.0f : std::expm1(x[i]) + 1.0f;
    if constexpr (kMap == FeatureMap::kSqr) y[i] = x[i] * x[i];
  }
}

template <FeatureMap kMap>
void FeatureGradientRow(const float* x, const float* g, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (kMap == FeatureMap::kRelu) y[i] = x[i] > 0 ? g[i] : 0.0f;
    if constexpr (kMap == FeatureMap::kElu1) y[i] = x[i] > 0 ? g[i] : g[i] * std::exp(x[i]);
    if constexpr (kMap == FeatureMap::kSqr) y[i] = 2.0f * (x[i] * g[i]);
  }
}

using FeatureRowFn = void (*)(const float*, float*, int64_t);
using FeatureGradientRowFn = void (*)(const float*, const float*, float*, int64_t);

FeatureRowFn FeatureRowFor(FeatureMap map) {
  switch (map) {
    case FeatureMap::kRelu:
      return FeatureRow<FeatureMap::kRelu>;
    case FeatureMap::kElu1:
      return FeatureRow<FeatureMap::kElu1>;
    case FeatureMap::kSqr:
      return FeatureRow<FeatureMap::kSqr>;
    case FeatureMap::kFavor:
      break;
  }
  TORCH_CHECK(false, "layer kernels: favor+ features are not served");
}

FeatureGradientRowFn FeatureGradientRowFor(FeatureMap map) {
  switch (map) {
    case FeatureMap::kRelu:
      return FeatureGradientRow<FeatureMap::kRelu>;
    case FeatureMap::kElu1:
      return FeatureGradientRow<FeatureMap::kElu1>;
    case FeatureMap::kSqr:
      return FeatureGradientRow<FeatureMap::kSqr>;
    case FeatureMap::kFavor:
      break;
  }
  TORCH_CHECK(false, "layer kernels: favor+ features are not served");
}

void CheckAll(std::initializer_list<const at::Tensor*> tensors, const char* what) {
  for (const at::Tensor* t : tensors) CheckFloat(*t, what);
}

}  // namespace

bool LayerKernelsApply(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

void EmbedCpu(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& embedding,
              const at::Tensor& frequencies, at::Tensor& x0) {
  CheckAll({&embedding, &frequencies, &x0}, "embedding");
  const int64_t rows = x0.size(0), d = x0.size(1), half = embedding.size(1), quarter = frequencies.size(0);
  Check(tokens.device().is_cpu() && tokens.scalar_type() == at::kLong && tokens.is_contiguous() &&
            positions.device().is_cpu() && positions.scalar_type() == at::kLong &&
            positions.is_contiguous() && tokens.sizes() == at::IntArrayRef({rows}) &&
            positions.sizes() == tokens.sizes(),
        "embedding: tokens and positions must be contiguous int64 CPU tensors of one value per row");
  Check(x0.dim() == 2 && half * 2 == d && quarter * 4 == d, "embedding: shapes differ");
  const int64_t vocab = embedding.size(0);
  const int64_t* token = tokens.data_ptr<int64_t>();
  for (int64_t s = 0; s < rows; ++s) {
    TORCH_CHECK(token[s] >= 0 && token[s] < vocab, "embedding: token ", token[s], " outside [0, ", vocab,
                ")");
  }
  const int64_t* position = positions.data_ptr<int64_t>();
  const float* e = embedding.data_ptr<float>();
  const float* f = frequencies.data_ptr<float>();
  float* out = x0.data_ptr<float>();
  at::parallel_for(0, rows, RowGrain(4 * d), [&](int64_t first, int64_t last) {
    for (int64_t s = first; s < last; ++s) {
      float* row = out + s * d;
      std::memcpy(row, e + token[s] * half, sizeof(float) * half);
      const float p = static_cast<float>(position[s]);
      for (int64_t i = 0; i < quarter; ++i) {
        const float angle = p * f[i];
        row[half + i] = std::sin(angle);
        row[half + quarter + i] = std::cos(angle);
      }
    }
  });
}

void EmbedBackwardCpu(const at::Tensor& tokens, const at::Tensor& g_x0, at::Tensor& sink) {
  CheckAll({&g_x0, &sink}, "embedding backward");
  const int64_t rows = g_x0.size(0), d = g_x0.size(1), half = sink.size(1), vocab = sink.size(0);
  Check(tokens.device().is_cpu() && tokens.scalar_type() == at::kLong && tokens.is_contiguous() &&
            tokens.sizes() == at::IntArrayRef({rows}) && half * 2 == d,
        "embedding backward: shapes differ");
  const int64_t* token = tokens.data_ptr<int64_t>();
  const float* g = g_x0.data_ptr<float>();
  float* out = sink.data_ptr<float>();
  for (int64_t s = 0; s < rows; ++s) {
    TORCH_CHECK(token[s] >= 0 && token[s] < vocab, "embedding: token ", token[s], " outside [0, ", vocab,
                ")");
    float* target = out + token[s] * half;
    const float* source = g + s * d;
    for (int64_t i = 0; i < half; ++i) target[i] += source[i];
  }
}

void AddColumnSumsCpu(at::Tensor& sink, const at::Tensor& g) {
  CheckFloat(sink, "bias sink");
  CheckFloat(g, "gradient");
  Check(g.dim() == 2 && sink.dim() == 1 && sink.size(0) == g.size(1), "column sums: shapes differ");
  const int64_t rows = g.size(0), n = g.size(1);
  float* out = sink.data_ptr<float>();
  const float* in = g.data_ptr<float>();
  // Columns split between threads; each sums its columns in double (rows may be thousands).
  at::parallel_for(0, n, std::max<int64_t>(16, kParallelValues / std::max<int64_t>(1, rows)),
                   [&](int64_t first, int64_t last) {
                     std::vector<double> sums(last - first, 0.0);
                     for (int64_t r = 0; r < rows; ++r) {
                       const float* row = in + r * n + first;
                       for (int64_t c = 0; c < last - first; ++c) sums[c] += row[c];
                     }
                     for (int64_t c = first; c < last; ++c) out[c] += static_cast<float>(sums[c - first]);
                   });
}

void SplitHeadsCpu(FeatureMap map, const at::Tensor& qkv, int64_t heads, at::Tensor& phi, at::Tensor& v) {
  CheckFloat(qkv, "qkv");
  CheckFloat(phi, "phi");
  CheckFloat(v, "v");
  const int64_t rows = qkv.size(0), d = qkv.size(1) / 3, h = d / heads;
  Check(qkv.dim() == 2 && qkv.size(1) == 3 * d && d == heads * h, "split heads: qkv is not [S, 3d]");
  Check(phi.sizes() == at::IntArrayRef({2, heads, rows, h}) && v.sizes() == at::IntArrayRef({heads, rows, h}),
        "split heads: outputs have the wrong shape");
  const float* in = qkv.data_ptr<float>();
  float* phi_out = phi.data_ptr<float>();
  float* v_out = v.data_ptr<float>();
  const FeatureRowFn feature = FeatureRowFor(map);
  at::parallel_for(0, rows, RowGrain(3 * d), [&](int64_t first, int64_t last) {
    for (int64_t s = first; s < last; ++s) {
      const float* row = in + s * 3 * d;
      for (int64_t j = 0; j < 2; ++j) {
        for (int64_t head = 0; head < heads; ++head) {
          const float* x = row + j * d + head * h;
          float* y = phi_out + ((j * heads + head) * rows + s) * h;
          feature(x, y, h);
        }
      }
      for (int64_t head = 0; head < heads; ++head) {
        std::memcpy(v_out + (head * rows + s) * h, row + 2 * d + head * h, sizeof(float) * h);
      }
    }
  });
}

void JoinHeadGradientsCpu(FeatureMap map, const at::Tensor& qkv, const at::Tensor& g_phi_q,
                          const at::Tensor& g_phi_k, const at::Tensor& g_v, at::Tensor& g_qkv) {
  CheckAll({&qkv, &g_phi_q, &g_phi_k, &g_v, &g_qkv}, "head gradients");
  const int64_t heads = g_v.size(0), rows = qkv.size(0), h = g_v.size(2), d = heads * h;
  Check(qkv.sizes() == at::IntArrayRef({rows, 3 * d}) && g_qkv.sizes() == qkv.sizes() &&
            g_phi_q.sizes() == g_v.sizes() && g_phi_k.sizes() == g_v.sizes() && g_v.size(1) == rows,
        "join head gradients: shapes differ");
  const float* x = qkv.data_ptr<float>();
  const float* gq = g_phi_q.data_ptr<float>();
  const float* gk = g_phi_k.data_ptr<float>();
  const float* gv = g_v.data_ptr<float>();
  float* out = g_qkv.data_ptr<float>();
  const FeatureGradientRowFn gradient = FeatureGradientRowFor(map);
  at::parallel_for(0, rows, RowGrain(3 * d), [&](int64_t first, int64_t last) {
    for (int64_t s = first; s < last; ++s) {
      const float* row = x + s * 3 * d;
      float* g_row = out + s * 3 * d;
      for (int64_t head = 0; head < heads; ++head) {
        const int64_t at_head = (head * rows + s) * h;
        gradient(row + head * h, gq + at_head, g_row + head * h, h);
        gradient(row + d + head * h, gk + at_head, g_row + d + head * h, h);
        std::memcpy(g_row + 2 * d + head * h, gv + at_head, sizeof(float) * h);
      }
    }
  });
}

void NormalizeAttentionCpu(const at::Tensor& num, const at::Tensor& den, double eps, at::Tensor& den_eps,
                           at::Tensor& attention) {
  CheckAll({&num, &den, &den_eps, &attention}, "attention");
  const int64_t heads = num.size(0), rows = num.size(1), h = num.size(2);
  Check(den.sizes() == at::IntArrayRef({heads, rows}) && den_eps.sizes() == den.sizes() &&
            attention.sizes() == at::IntArrayRef({rows, heads * h}),
        "normalise attention: shapes differ");
  const float* n = num.data_ptr<float>();
  const float* z = den.data_ptr<float>();
  float* z_eps = den_eps.data_ptr<float>();
  float* a = attention.data_ptr<float>();
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows, RowGrain(heads * h), [&](int64_t first, int64_t last) {
    for (int64_t s = first; s < last; ++s) {
      for (int64_t head = 0; head < heads; ++head) {
        const float divisor = z[head * rows + s] + e;
        z_eps[head * rows + s] = divisor;
        const float* in = n + (head * rows + s) * h;
        float* out = a + s * heads * h + head * h;
        for (int64_t i = 0; i < h; ++i) out[i] = in[i] / divisor;
      }
    }
  });
}

void NormalizeAttentionBackwardCpu(const at::Tensor& g_attention, const at::Tensor& attention,
                                   const at::Tensor& den_eps, at::Tensor& g_num, at::Tensor& g_den) {
  CheckAll({&g_attention, &attention, &den_eps, &g_num, &g_den}, "attention");
  const int64_t heads = den_eps.size(0), rows = den_eps.size(1), h = g_num.size(2);
  Check(g_attention.sizes() == at::IntArrayRef({rows, heads * h}) &&
            attention.sizes() == g_attention.sizes() && g_num.sizes() == at::IntArrayRef({heads, rows, h}) &&
            g_den.sizes() == den_eps.sizes(),
        "normalise attention backward: shapes differ");
  const float* ga = g_attention.data_ptr<float>();
  const float* a = attention.data_ptr<float>();
  const float* z = den_eps.data_ptr<float>();
  float* gn = g_num.data_ptr<float>();
  float* gz = g_den.data_ptr<float>();
  at::parallel_for(0, rows, RowGrain(heads * h), [&](int64_t first, int64_t last) {
    for (int64_t s = first; s < last; ++s) {
      for (int64_t head = 0; head < heads; ++head) {
        const float divisor = z[head * rows + s];
        const float* g_in = ga + s * heads * h + head * h;
        const float* a_in = a + s * heads * h + head * h;
        float* out = gn + (head * rows + s) * h;
        float sum = 0;
        for (int64_t i = 0; i < h; ++i) {
          out[i] = g_in[i] / divisor;
          sum += out[i] * a_in[i];
        }
        gz[head * rows + s] = -sum;
      }
    }
  });
}

void LayerNormCpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                  at::Tensor& y, at::Tensor& mean, at::Tensor& rstd) {
  CheckAll({&x, &weight, &bias, &y, &mean, &rstd}, "LayerNorm");
  const int64_t rows = x.size(0), n = x.size(1);
  Check(x.dim() == 2 && weight.sizes() == at::IntArrayRef({n}) && bias.sizes() == weight.sizes() &&
            y.sizes() == x.sizes() && mean.sizes() == at::IntArrayRef({rows, 1}) &&
            rstd.sizes() == mean.sizes(),
        "LayerNorm: shapes differ");
  const float* in = x.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  float* out = y.data_ptr<float>();
  float* mu = mean.data_ptr<float>();
  float* rs = rstd.data_ptr<float>();
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows, RowGrain(n), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) LayerNormRow(in + r * n, w, b, e, n, out + r * n, mu + r, rs + r);
  });
}

void LayerNormBackwardCpu(const at::Tensor& g, const at::Tensor& x, const at::Tensor& mean,
                          const at::Tensor& rstd, const at::Tensor& weight, at::Tensor& g_x,
                          at::Tensor& sink_weight, at::Tensor& sink_bias) {
  CheckAll({&g, &x, &mean, &rstd, &weight, &g_x, &sink_weight, &sink_bias}, "LayerNorm backward");
  const int64_t rows = x.size(0), n = x.size(1);
  Check(x.dim() == 2 && g.sizes() == x.sizes() && g_x.sizes() == x.sizes() &&
            mean.sizes() == at::IntArrayRef({rows, 1}) && rstd.sizes() == mean.sizes() &&
            weight.sizes() == at::IntArrayRef({n}) && sink_weight.sizes() == weight.sizes() &&
            sink_bias.sizes() == weight.sizes(),
        "LayerNorm backward: shapes differ");
  const float* gp = g.data_ptr<float>();
  const float* in = x.data_ptr<float>();
  const float* mu = mean.data_ptr<float>();
  const float* rs = rstd.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  float* out = g_x.data_ptr<float>();
  at::parallel_for(0, rows, RowGrain(n), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      LayerNormBackwardRow(gp + r * n, in + r * n, w, mu[r], rs[r], n, out + r * n);
    }
  });
  // The weight's and bias's gradients: column sums, the columns split between threads.
  float* sw = sink_weight.data_ptr<float>();
  float* sb = sink_bias.data_ptr<float>();
  at::parallel_for(0, n, std::max<int64_t>(16, kParallelValues / std::max<int64_t>(1, rows)),
                   [&](int64_t first, int64_t last) {
                     std::vector<double> gw(last - first, 0.0), gb(last - first, 0.0);
                     for (int64_t r = 0; r < rows; ++r) {
                       const float* gr = gp + r * n + first;
                       const float* xr = in + r * n + first;
                       for (int64_t c = 0; c < last - first; ++c) {
                         gw[c] += gr[c] * ((xr[c] - mu[r]) * rs[r]);
                         gb[c] += gr[c];
                       }
                     }
                     for (int64_t c = first; c < last; ++c) {
                       sw[c] += static_cast<float>(gw[c - first]);
                       sb[c] += static_cast<float>(gb[c - first]);
                     }
                   });
}

namespace {

void CheckIndices(const at::Tensor& indices, int64_t count, int64_t bound, const char* what) {
  Check(indices.device().is_cpu() && indices.scalar_type() == at::kLong && indices.is_contiguous() &&
            indices.dim() == 1 && indices.size(0) == count,
        what);
  const int64_t* index = indices.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    TORCH_CHECK(index[i] >= 0 && index[i] < bound, "layer kernels: ", what, ": index ", index[i],
                " outside [0, ", bound, ")");
  }
}

}  // namespace

double LogSoftmaxCrossEntropyCpu(at::Tensor& logits, const at::Tensor& targets) {
  CheckFloat(logits, "logits");
  const int64_t rows = logits.size(0), n = logits.size(1);
  CheckIndices(targets, rows, n, "cross-entropy targets");
  float* x = logits.data_ptr<float>();
  const int64_t* target = targets.data_ptr<int64_t>();
  double loss = 0;
  for (int64_t p = 0; p < rows; ++p) {
    float* row = x + p * n;
    LogSoftmaxRow(row, n);
    loss -= row[target[p]];
  }
  return loss;
}

void LogSoftmaxCrossEntropyBackwardCpu(const at::Tensor& log_probs, const at::Tensor& targets, float scale,
                                       at::Tensor& g_logits) {
  CheckAll({&log_probs, &g_logits}, "cross-entropy backward");
  const int64_t rows = log_probs.size(0), n = log_probs.size(1);
  Check(g_logits.sizes() == log_probs.sizes(), "cross-entropy backward: shapes differ");
  CheckIndices(targets, rows, n, "cross-entropy targets");
  const float* lp = log_probs.data_ptr<float>();
  const int64_t* target = targets.data_ptr<int64_t>();
  float* out = g_logits.data_ptr<float>();
  at::parallel_for(0, rows, RowGrain(2 * n), [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      SoftmaxRow(lp + p * n, scale, n, out + p * n);
      out[p * n + target[p]] -= scale;
    }
  });
}

void AddRowsCpu(const at::Tensor& rows, const at::Tensor& source, at::Tensor& target) {
  CheckAll({&source, &target}, "add rows");
  const int64_t count = source.size(0), n = source.size(1);
  Check(target.dim() == 2 && target.size(1) == n, "add rows: shapes differ");
  CheckIndices(rows, count, target.size(0), "add rows");
  const int64_t* row = rows.data_ptr<int64_t>();
  const float* in = source.data_ptr<float>();
  float* out = target.data_ptr<float>();
  for (int64_t i = 0; i < count; ++i) {
    float* t = out + row[i] * n;
    const float* s = in + i * n;
    for (int64_t c = 0; c < n; ++c) t[c] += s[c];
  }
}

void GeluCpu(const at::Tensor& u, at::Tensor& hidden) {
  CheckFloat(u, "GELU input");
  CheckFloat(hidden, "GELU output");
  Check(u.sizes() == hidden.sizes(), "GELU: shapes differ");
  const float* in = u.data_ptr<float>();
  float* out = hidden.data_ptr<float>();
  at::parallel_for(0, u.numel(), kParallelValues,
                   [&](int64_t first, int64_t last) { GeluRange(in + first, out + first, last - first); });
}

void GeluBackwardCpu(const at::Tensor& g_hidden, const at::Tensor& u, at::Tensor& g_u) {
  CheckAll({&g_hidden, &u, &g_u}, "GELU backward");
  Check(u.sizes() == g_hidden.sizes() && g_u.sizes() == u.sizes(), "GELU backward: shapes differ");
  const float* g = g_hidden.data_ptr<float>();
  const float* in = u.data_ptr<float>();
  float* out = g_u.data_ptr<float>();
  at::parallel_for(0, u.numel(), kParallelValues, [&](int64_t first, int64_t last) {
    GeluBackwardRange(g + first, in + first, out + first, last - first);
  });
}

}  // namespace slimfit::performer
