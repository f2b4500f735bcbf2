// The chunked causal prefix sums (prefix_attention.h, PrefixMode::kChunked) as fused CPU kernels:
// one pass per head over raw float32 buffers, the heads in parallel on LibTorch's OpenMP team, the
// block products through oneDNN's sgemm on the calling thread (matrix_products.h), the masking,
// row sums and rank-one terms as plain loops the compiler vectorises.
//
// The LibTorch form of the same arithmetic spends most of its time outside arithmetic: every block
// is a dozen ATen calls, and each batched product is split by ATen into one call per head. At the
// block and slice sizes the engine uses (64 rows, 4 heads of 64) that overhead is many times the
// FLOPs (BENCHMARKS.md, "What rate do the CPU's matrix products and prefix sums run at?").
//
// Same equations, same block order as ChunkedPrefixFunction in prefix_attention.cc (whose comment
// derives them); results equal it to float32 rounding.
//
// Shapes as in prefix_attention.h: φq, φk [k, S, M], v [k, S, d], front [k, M, d] and [k, M];
// other shapes, or block < 1, are a c10::Error. Inputs may be views whose rows are contiguous (last
// stride 1), e.g. segments narrowed out of a stretch. Outputs are fresh tensors written through
// raw pointers (their autograd version counters are not bumped: nothing else holds them yet).
// Parallelism is over heads only: with more cores than heads the rest idle (2 cores and 4 heads
// on the reference machine); below 64 rows the heads run on the calling thread (a parallel
// region's start and join cost more than a head's work: 11% of the whole gradient at C = 16).
// Thread safety: pure functions of their tensors.
#ifndef SLIMFIT_PERFORMER_PREFIX_ATTENTION_CPU_H_
#define SLIMFIT_PERFORMER_PREFIX_ATTENTION_CPU_H_

#include <ATen/ATen.h>

#include <cstdint>

namespace slimfit::performer {

// True when the fused kernels can take these tensors: float32 on the CPU, innermost stride 1, in a
// build with oneDNN, and the kernels are enabled.
bool FusedPrefixApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& r0,
                        const at::Tensor& z0);

// Turns the fused kernels on (the default) or off process-wide, so that benchmarks and tests can
// compare them with the LibTorch form. Thread safety: an atomic flag; do not flip it while a
// prefix sum runs (its backward would take the other form — equal results, different speed).
void EnableFusedPrefixKernels(bool enabled);

struct FusedPrefixForward {
  at::Tensor numerator, denominator;          // [k, S, d], [k, S]
  at::Tensor end_numerator, end_denominator;  // the front after the last row
};

// REQUIRES: FusedPrefixApplies(q, k, v, r0, z0); block ≥ 1.
FusedPrefixForward FusedPrefixForwardCpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& r0, const at::Tensor& z0, int64_t block);

struct FusedPrefixGradients {
  at::Tensor q, k, v, r0, z0;
};

// The gradients of every input given those of the four outputs (each defined, same shapes as the
// forward's). REQUIRES: as FusedPrefixForwardCpu, and the gradients float32 on the CPU.
FusedPrefixGradients FusedPrefixBackwardCpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                            const at::Tensor& grad_numerator,
                                            const at::Tensor& grad_denominator,
                                            const at::Tensor& grad_end_numerator,
                                            const at::Tensor& grad_end_denominator);

// The front before a stretch without document starts, from the front after it: after_numerator −
// Σ_rows φk ⊗ v and after_denominator − Σ_rows φk (Likhosherstov et al., eq. 9), one product per
// head with the subtraction folded in. Fresh contiguous outputs.
// REQUIRES: FusedPrefixApplies(k, k, v, after_numerator, after_denominator).
struct FusedFront {
  at::Tensor numerator, denominator;
};
FusedFront FusedFrontWithoutCpu(const at::Tensor& after_numerator, const at::Tensor& after_denominator,
                                const at::Tensor& k, const at::Tensor& v);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PREFIX_ATTENTION_CPU_H_
