// The matrix products of the engine's linear maps: forward (bias + x·Wᵀ), input gradient and the
// weight gradient accumulated in place.
//
// On the CPU, float32 products go to oneDNN's sgemm (Debian's libdnnl, the library LibTorch
// itself links for its convolutions) when the build has it (SLIMFIT_WITH_ONEDNN). LibTorch's own
// path for a float32 matrix product is OpenBLAS, whose kernels lose most of their speed on the row
// counts of small slices; on the 2-core reference machine, 16 rows through a 1024 → 256 map ran
// the forward, input-gradient and weight-gradient products at 170 / 204 / 154 GFLOP/s in oneDNN
// against 54 / 91 / 40 in OpenBLAS (BENCHMARKS.md, "What rate do the CPU's matrix products and prefix
// sums run at?"; at 256
// rows and more the two are closer, and not every product is faster). Everything else —
// float64, CUDA tensors, operands with no unit stride, builds without oneDNN — goes to LibTorch
// unchanged. Results equal LibTorch's to float32 rounding (the order of the sums differs).
//
// Threads: oneDNN runs on the calling thread's OpenMP team (omp_get_max_threads), which
// ConfigureCpuThreads sizes (cpu_runtime.h).
//
// These functions do not record autograd history: call them where gradients are not being
// recorded (inside a custom autograd function, or under NoGradGuard) or on tensors that do not
// require gradients; AddBiasProduct falls back to LibTorch otherwise.
// Thread safety: pure functions of their arguments (AccumulateProduct writes only `out`).
#ifndef SLIMFIT_PERFORMER_MATRIX_PRODUCTS_H_
#define SLIMFIT_PERFORMER_MATRIX_PRODUCTS_H_

#include <ATen/ATen.h>

namespace slimfit::performer {

// bias + a·b, bias broadcast over the rows; an undefined bias means none.
// REQUIRES: a [m, k], b [k, n], bias [n] or undefined; same dtype and device.
at::Tensor AddBiasProduct(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b);

// a·b. REQUIRES: a [m, k], b [k, n].
at::Tensor Product(const at::Tensor& a, const at::Tensor& b);

// out += a·b, in place. REQUIRES: out [m, n], a [m, k], b [k, n].
void AccumulateProduct(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);

// Mixed precision: the products above with their operands rounded to `compute` (bfloat16: a GPU's
// matrix units; the BLAS accumulates in float32, or in reduced precision where LibTorch lets
// cuBLAS do so — its default for bfloat16), the product rounded to `compute` and
// returned in a's dtype; AccumulateProductIn adds it to `out` in out's dtype. With `compute`
// Undefined or a's own dtype they are AddBiasProduct and AccumulateProduct. The rounding records
// autograd history like any LibTorch op.
at::Tensor AddBiasProductIn(at::ScalarType compute, const at::Tensor& bias, const at::Tensor& a,
                            const at::Tensor& b);
void AccumulateProductIn(at::ScalarType compute, at::Tensor& out, const at::Tensor& a, const at::Tensor& b);

// True when float32 CPU products go to oneDNN in this build; for reports and thread settings.
bool OneDnnProducts();

// c = alpha·op(a)·op(b) + beta·c on raw row-major float32 buffers, op = 'N' (as is) or 'T'
// (transposed), op(a) [m, k], op(b) [k, n]; for kernels that walk their own buffers (e.g.
// prefix_attention_cpu.h). Called inside an OpenMP parallel region it runs on the calling thread.
// REQUIRES: OneDnnProducts(); m, n, k ≥ 1. Throws c10::Error if oneDNN reports a failure.
void RowMajorSgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_MATRIX_PRODUCTS_H_
