#include "performer/prefix_attention_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "performer/matrix_products.h"
#include "performer/prefix_shapes.h"

namespace slimfit::performer {
namespace {

// One head's rows of a [k, S, n] tensor: the first row and the distance between rows.
struct Rows {
  const float* data;
  int64_t ld;
};

Rows HeadRows(const at::Tensor& t, int64_t head) {
  return Rows{t.data_ptr<float>() + head * t.stride(0), t.size(1) > 1 ? t.stride(1) : t.size(2)};
}

bool RowsContiguous(const at::Tensor& t) {
  return t.dim() == 3 && (t.stride(2) == 1 || t.size(2) == 1) && t.stride(1) >= t.size(2);
}

std::atomic<bool> fused_enabled{true};

constexpr int64_t kParallelRows = 64;

bool CpuFloat(const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat; }

// Heads per thread: all of them (one thread) when a head's work is too small to repay a parallel
// region's start and join.
int64_t HeadGrain(int64_t heads, int64_t rows) { return rows < kParallelRows ? heads : 1; }

// Zeroes the entries above the diagonal of an n × n row-major block.
void ZeroAboveDiagonal(float* a, int64_t n) {
  for (int64_t i = 0; i + 1 < n; ++i) std::fill(a + i * n + i + 1, a + (i + 1) * n, 0.0f);
}

}  // namespace

bool FusedPrefixApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& r0,
                        const at::Tensor& z0) {
  return fused_enabled.load(std::memory_order_relaxed) && OneDnnProducts() && CpuFloat(q) && CpuFloat(k) &&
         CpuFloat(v) && CpuFloat(r0) && CpuFloat(z0) && RowsContiguous(q) && RowsContiguous(k) &&
         RowsContiguous(v) && q.size(1) > 0;
}

void EnableFusedPrefixKernels(bool enabled) { fused_enabled.store(enabled, std::memory_order_relaxed); }

FusedPrefixForward FusedPrefixForwardCpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
  CheckPrefixShapes("fused prefix sums", q, k, v, r0, z0, block);
  const int64_t heads = q.size(0), rows = q.size(1), features = q.size(2), dim = v.size(2);
  const int64_t b = std::min(block, rows);
  FusedPrefixForward out;
  out.numerator = at::empty({heads, rows, dim}, v.options());
  out.denominator = at::empty({heads, rows}, v.options());
  out.end_numerator = r0.clone(at::MemoryFormat::Contiguous);  // R, updated block by block
  out.end_denominator = z0.clone(at::MemoryFormat::Contiguous);
  const at::Tensor scores = at::empty({heads, b, b}, v.options());
  at::parallel_for(0, heads, HeadGrain(heads, rows), [&](int64_t first, int64_t last) {
    for (int64_t h = first; h < last; ++h) {
      const Rows qh = HeadRows(q, h), kh = HeadRows(k, h), vh = HeadRows(v, h);
      float* r = out.end_numerator.data_ptr<float>() + h * features * dim;
      float* z = out.end_denominator.data_ptr<float>() + h * features;
      float* num = out.numerator.data_ptr<float>() + h * rows * dim;
      float* den = out.denominator.data_ptr<float>() + h * rows;
      float* a = scores.data_ptr<float>() + h * b * b;
      for (int64_t begin = 0; begin < rows; begin += b) {
        const int64_t n = std::min(b, rows - begin);
        const float* qb = qh.data + begin * qh.ld;
        const float* kb = kh.data + begin * kh.ld;
        const float* vb = vh.data + begin * vh.ld;
        // A = tril(Q Kᵀ); num = Q R + A V; den = Q Z + A·1; R += Kᵀ V; Z += Kᵀ·1.
        RowMajorSgemm('N', 'T', n, n, features, 1.0f, qb, qh.ld, kb, kh.ld, 0.0f, a, n);
        ZeroAboveDiagonal(a, n);
        RowMajorSgemm('N', 'N', n, dim, features, 1.0f, qb, qh.ld, r, dim, 0.0f, num + begin * dim, dim);
        RowMajorSgemm('N', 'N', n, dim, n, 1.0f, a, n, vb, vh.ld, 1.0f, num + begin * dim, dim);
        for (int64_t i = 0; i < n; ++i) {
          float sum = 0;
          for (int64_t m = 0; m < features; ++m) sum += qb[i * qh.ld + m] * z[m];
          for (int64_t j = 0; j <= i; ++j) sum += a[i * n + j];
          den[begin + i] = sum;
        }
        RowMajorSgemm('T', 'N', features, dim, n, 1.0f, kb, kh.ld, vb, vh.ld, 1.0f, r, dim);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t m = 0; m < features; ++m) z[m] += kb[i * kh.ld + m];
        }
      }
    }
  });
  return out;
}

FusedPrefixGradients FusedPrefixBackwardCpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                            const at::Tensor& grad_numerator,
                                            const at::Tensor& grad_denominator,
                                            const at::Tensor& grad_end_numerator,
                                            const at::Tensor& grad_end_denominator) {
  CheckPrefixShapes("fused prefix sums", q, k, v, r0, z0, block);
  CheckPrefixGradientShapes("fused prefix sums", q, v, r0, z0, grad_numerator, grad_denominator,
                            grad_end_numerator, grad_end_denominator);
  const int64_t heads = q.size(0), rows = q.size(1), features = q.size(2), dim = v.size(2);
  const int64_t b = std::min(block, rows);
  const int64_t blocks = (rows + b - 1) / b;
  const at::Tensor gn = grad_numerator.contiguous();
  const at::Tensor gd = grad_denominator.contiguous();
  FusedPrefixGradients g;
  g.q = at::empty({heads, rows, features}, q.options());
  g.k = at::empty({heads, rows, features}, q.options());
  g.v = at::empty({heads, rows, dim}, v.options());
  g.r0 = grad_end_numerator.clone(at::MemoryFormat::Contiguous);  // dR: the front-after-the-block's gradient
  g.z0 = grad_end_denominator.clone(at::MemoryFormat::Contiguous);
  // The block-start fronts, rebuilt forwards from the saved start front (exact, no subtraction).
  const at::Tensor starts_r = at::empty({heads, blocks, features, dim}, v.options());
  const at::Tensor starts_z = at::empty({heads, blocks, features}, v.options());
  const at::Tensor r_start = r0.contiguous();
  const at::Tensor z_start = z0.contiguous();
  const at::Tensor scores = at::empty({heads, 2, b, b}, v.options());
  at::parallel_for(0, heads, HeadGrain(heads, rows), [&](int64_t first, int64_t last) {
    for (int64_t h = first; h < last; ++h) {
      const Rows qh = HeadRows(q, h), kh = HeadRows(k, h), vh = HeadRows(v, h);
      float* rs = starts_r.data_ptr<float>() + h * blocks * features * dim;
      float* zs = starts_z.data_ptr<float>() + h * blocks * features;
      std::memcpy(rs, r_start.data_ptr<float>() + h * features * dim, sizeof(float) * features * dim);
      std::memcpy(zs, z_start.data_ptr<float>() + h * features, sizeof(float) * features);
      for (int64_t j = 0; j + 1 < blocks; ++j) {
        const int64_t begin = j * b;
        const float* kb = kh.data + begin * kh.ld;
        float* r_next = rs + (j + 1) * features * dim;
        float* z_next = zs + (j + 1) * features;
        std::memcpy(r_next, rs + j * features * dim, sizeof(float) * features * dim);
        std::memcpy(z_next, zs + j * features, sizeof(float) * features);
        RowMajorSgemm('T', 'N', features, dim, b, 1.0f, kb, kh.ld, vh.data + begin * vh.ld, vh.ld, 1.0f,
                      r_next, dim);
        for (int64_t i = 0; i < b; ++i) {
          for (int64_t m = 0; m < features; ++m) z_next[m] += kb[i * kh.ld + m];
        }
      }

      const float* gnh = gn.data_ptr<float>() + h * rows * dim;
      const float* gdh = gd.data_ptr<float>() + h * rows;
      float* dq = g.q.data_ptr<float>() + h * rows * features;
      float* dk = g.k.data_ptr<float>() + h * rows * features;
      float* dv = g.v.data_ptr<float>() + h * rows * dim;
      float* dr = g.r0.data_ptr<float>() + h * features * dim;
      float* dz = g.z0.data_ptr<float>() + h * features;
      float* a = scores.data_ptr<float>() + h * 2 * b * b;
      float* da = a + b * b;
      for (int64_t j = blocks - 1; j >= 0; --j) {
        const int64_t begin = j * b;
        const int64_t n = std::min(b, rows - begin);
        const float* qb = qh.data + begin * qh.ld;
        const float* kb = kh.data + begin * kh.ld;
        const float* vb = vh.data + begin * vh.ld;
        const float* gnb = gnh + begin * dim;
        const float* gdb = gdh + begin;
        const float* r = rs + j * features * dim;
        const float* z = zs + j * features;
        float* dqb = dq + begin * features;
        float* dkb = dk + begin * features;
        float* dvb = dv + begin * dim;
        // A = tril(Q Kᵀ);  dA = tril(gN Vᵀ + gD·1ᵀ)
        RowMajorSgemm('N', 'T', n, n, features, 1.0f, qb, qh.ld, kb, kh.ld, 0.0f, a, n);
        ZeroAboveDiagonal(a, n);
        RowMajorSgemm('N', 'T', n, n, dim, 1.0f, gnb, dim, vb, vh.ld, 0.0f, da, n);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t c = 0; c <= i; ++c) da[i * n + c] += gdb[i];
        }
        ZeroAboveDiagonal(da, n);
        // dQ = gN Rᵀ + gD Zᵀ + dA K
        RowMajorSgemm('N', 'T', n, features, dim, 1.0f, gnb, dim, r, dim, 0.0f, dqb, features);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t m = 0; m < features; ++m) dqb[i * features + m] += gdb[i] * z[m];
        }
        RowMajorSgemm('N', 'N', n, features, n, 1.0f, da, n, kb, kh.ld, 1.0f, dqb, features);
        // dK = dAᵀ Q + V dRᵀ + 1·dZᵀ
        RowMajorSgemm('T', 'N', n, features, n, 1.0f, da, n, qb, qh.ld, 0.0f, dkb, features);
        RowMajorSgemm('N', 'T', n, features, dim, 1.0f, vb, vh.ld, dr, dim, 1.0f, dkb, features);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t m = 0; m < features; ++m) dkb[i * features + m] += dz[m];
        }
        // dV = Aᵀ gN + K dR
        RowMajorSgemm('T', 'N', n, dim, n, 1.0f, a, n, gnb, dim, 0.0f, dvb, dim);
        RowMajorSgemm('N', 'N', n, dim, features, 1.0f, kb, kh.ld, dr, dim, 1.0f, dvb, dim);
        // The gradient of the block-start front: dR += Qᵀ gN, dZ += Qᵀ gD.
        RowMajorSgemm('T', 'N', features, dim, n, 1.0f, qb, qh.ld, gnb, dim, 1.0f, dr, dim);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t m = 0; m < features; ++m) dz[m] += qb[i * qh.ld + m] * gdb[i];
        }
      }
    }
  });
  return g;
}

FusedFront FusedFrontWithoutCpu(const at::Tensor& after_numerator, const at::Tensor& after_denominator,
                                const at::Tensor& k, const at::Tensor& v) {
  CheckPrefixShapes("fused front", k, k, v, after_numerator, after_denominator, /*block=*/1);
  const int64_t heads = k.size(0), rows = k.size(1), features = k.size(2), dim = v.size(2);
  FusedFront front{after_numerator.clone(at::MemoryFormat::Contiguous),
                   after_denominator.clone(at::MemoryFormat::Contiguous)};
  at::parallel_for(0, heads, HeadGrain(heads, rows), [&](int64_t first, int64_t last) {
    for (int64_t h = first; h < last; ++h) {
      const Rows kh = HeadRows(k, h), vh = HeadRows(v, h);
      float* z = front.denominator.data_ptr<float>() + h * features;
      if (rows > 0) {
        RowMajorSgemm('T', 'N', features, dim, rows, -1.0f, kh.data, kh.ld, vh.data, vh.ld, 1.0f,
                      front.numerator.data_ptr<float>() + h * features * dim, dim);
      }
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t m = 0; m < features; ++m) z[m] -= kh.data[i * kh.ld + m];
      }
    }
  });
  return front;
}

}  // namespace slimfit::performer
