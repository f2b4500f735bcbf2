#include "performer/matrix_products.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#ifdef SLIMFIT_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace slimfit::performer {
namespace {

// A 2-D tensor as a row-major sgemm operand: 'N' when its rows are contiguous, 'T' when its
// columns are (a transposed view), with the distance between rows (or columns) as leading
// dimension. A dimension of size 1 may carry any stride, so it never decides.
struct Operand {
  char trans;
  int64_t ld;
};

std::optional<Operand> AsOperand(const at::Tensor& t) {
  const int64_t rows = t.size(0);
  const int64_t cols = t.size(1);
  if (t.stride(1) == 1 || cols == 1) {
    const int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : t.stride(0);
    if (ld >= std::max<int64_t>(cols, 1)) return Operand{'N', ld};
  }
  if (t.stride(0) == 1 || rows == 1) {
    const int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : t.stride(1);
    if (ld >= std::max<int64_t>(rows, 1)) return Operand{'T', ld};
  }
  return std::nullopt;
}

char Flip(char trans) { return trans == 'N' ? 'T' : 'N'; }

// Below this many rows a product by a transposed right operand goes through its transpose
// (AddBiasProduct); from 128 rows on, oneDNN's own handling is as fast or faster (measured at
// 64, 256 and 4096 rows on the maps 256 → 768, 256 → 1024 and 1024 → 256).
constexpr int64_t kFewRows = 128;

// True when oneDNN can take the product: float32 CPU matrices, none of them recording history.
bool Eligible(std::initializer_list<const at::Tensor*> tensors) {
  if (!OneDnnProducts()) return false;
  const bool recording = at::GradMode::is_enabled();
  for (const at::Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat || t->layout() != at::kStrided) return false;
    if (recording && t->requires_grad()) return false;
  }
  return true;
}

// c = a·b + beta·c where c is row-major with leading dimension ldc (or, `c_transposed`, cᵀ is).
// Returns false when an operand has no unit stride (the caller falls back to LibTorch).
bool Sgemm(const at::Tensor& a, const at::Tensor& b, float beta, float* c, int64_t ldc, bool c_transposed) {
  const std::optional<Operand> oa = AsOperand(a);
  const std::optional<Operand> ob = AsOperand(b);
  if (!oa || !ob) return false;
  const int64_t m = a.size(0);
  const int64_t k = a.size(1);
  const int64_t n = b.size(1);
  if (!c_transposed) {
    RowMajorSgemm(oa->trans, ob->trans, m, n, k, 1.0f, a.data_ptr<float>(), oa->ld, b.data_ptr<float>(),
                  ob->ld, beta, c, ldc);
  } else {  // cᵀ (row-major [n, m]) = bᵀ·aᵀ
    RowMajorSgemm(Flip(ob->trans), Flip(oa->trans), n, m, k, 1.0f, b.data_ptr<float>(), ob->ld,
                  a.data_ptr<float>(), oa->ld, beta, c, ldc);
  }
  return true;
}

// Every row of the fresh contiguous `out` [m, n] set to `bias` [n]: one copy per row (the expand and
// copy_ of LibTorch cost more than the copying at the row counts of small slices).
void BroadcastRows(const at::Tensor& bias, at::Tensor& out) {
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == out.size(1), "bias of shape ", bias.sizes(),
              " for a product with ", out.size(1), " columns");
  if (!bias.is_contiguous()) {
    out.copy_(bias.expand(out.sizes()));
    return;
  }
  const float* row = bias.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = out.size(1);
  for (int64_t r = 0; r < out.size(0); ++r) std::memcpy(o + r * n, row, sizeof(float) * n);
}

bool ShapesMultiply(const at::Tensor& a, const at::Tensor& b) {
  return a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0) && a.size(0) > 0 && b.size(1) > 0 &&
         a.size(1) > 0;
}

}  // namespace

bool OneDnnProducts() {
#ifdef SLIMFIT_WITH_ONEDNN
  return true;
#else
  return false;
#endif
}

void RowMajorSgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef SLIMFIT_WITH_ONEDNN
  const dnnl_status_t status = dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  TORCH_CHECK(status == dnnl_success, "oneDNN sgemm of [", m, ", ", k, "] by [", k, ", ", n,
              "] failed with status ", static_cast<int>(status));
#else
  TORCH_CHECK(false, "RowMajorSgemm needs a build with oneDNN (SLIMFIT_WITH_ONEDNN); ", trans_a, trans_b, m,
              n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

at::Tensor AddBiasProduct(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b) {
  if (ShapesMultiply(a, b) && Eligible({&bias, &a, &b}) && (!bias.defined() || bias.dim() == 1)) {
    const int64_t m = a.size(0), n = b.size(1);
    const std::optional<Operand> ob = AsOperand(b);
    if (ob && ob->trans == 'T' && m < kFewRows) {
      // oneDNN takes a transposed right operand slowly at few rows (23–67 GFLOP/s at 16 rows here,
      // against 115–122 this way): compute (a·b)ᵀ = bᵀ·aᵀ, whose left operand is then the
      // weight's own rows, and transpose the small result.
      at::Tensor transposed = at::empty({n, m}, a.options());
      if (Sgemm(a, b, 0.0f, transposed.data_ptr<float>(), m, /*c_transposed=*/true)) {
        at::Tensor out = transposed.t().contiguous();
        if (bias.defined()) out.add_(bias);
        return out;
      }
    }
    at::Tensor out = at::empty({m, n}, a.options());
    if (bias.defined()) BroadcastRows(bias, out);
    if (Sgemm(a, b, bias.defined() ? 1.0f : 0.0f, out.data_ptr<float>(), out.size(1), false)) return out;
  }
  return bias.defined() ? at::addmm(bias, a, b) : at::mm(a, b);
}

at::Tensor Product(const at::Tensor& a, const at::Tensor& b) { return AddBiasProduct(at::Tensor(), a, b); }

void AccumulateProduct(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (ShapesMultiply(a, b) && out.dim() == 2 && out.size(0) == a.size(0) && out.size(1) == b.size(1) &&
      Eligible({&out, &a, &b})) {
    const std::optional<Operand> o = AsOperand(out);
    if (o && Sgemm(a, b, 1.0f, out.data_ptr<float>(), o->ld, o->trans == 'T')) return;
  }
  out.addmm_(a, b);
}

namespace {

bool Reduced(at::ScalarType compute, const at::Tensor& a) {
  return compute != at::ScalarType::Undefined && compute != a.scalar_type();
}

}  // namespace

at::Tensor AddBiasProductIn(at::ScalarType compute, const at::Tensor& bias, const at::Tensor& a,
                            const at::Tensor& b) {
  if (!Reduced(compute, a)) return AddBiasProduct(bias, a, b);
  const at::Tensor product = bias.defined() ? at::addmm(bias.to(compute), a.to(compute), b.to(compute))
                                            : at::mm(a.to(compute), b.to(compute));
  return product.to(a.scalar_type());
}

void AccumulateProductIn(at::ScalarType compute, at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (!Reduced(compute, a)) return AccumulateProduct(out, a, b);
  out.add_(at::mm(a.to(compute), b.to(compute)));
}

}  // namespace slimfit::performer
