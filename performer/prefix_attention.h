// Causal linear attention through prefix sums: the only place where the Performer passes signal
// along the sequence (Likhosherstov et al., eq. 2–3 and 5). For one stretch of S tokens and k heads it
// computes, for every row l and head h,
//   numerator_l   = (R_start + Σ_{l' ≤ l, same document} φk_l' ⊗ v_l')ᵀ φq_l      (d values)
//   denominator_l = (Z_start + Σ_{l' ≤ l, same document} φk_l')ᵀ φq_l             (1 value)
// where (R_start, Z_start) is the incoming front, used only by a first segment that continues a
// document from before the stretch; every other segment starts from zero. It also returns the
// front after the stretch, so slices can be chained and the whole sequence is one call.
//
// Two prefix modes with identical results:
//  - kCumsum materialises every prefix state R_l (S·k·M·d values) with ordinary autograd;
//  - kChunked works in blocks of b tokens with matrix products (intra-block causal scores plus the
//    block-start front) inside a custom autograd function that saves only φq, φk, v and the
//    incoming front, and rebuilds the block fronts during its backward. On the CPU it walks the
//    blocks one by one (fused float32 kernels, prefix_attention_cpu.h, or LibTorch's ops); on
//    other devices a segment of three blocks or more computes a group of blocks at once
//    (prefix_attention_blocks.h), since each LibTorch call there is a kernel launch; a shorter one
//    takes one fused kernel each way where the CUDA build has them and they are enabled
//    (prefix_attention_cuda.h), else LibTorch's ops block by block.
//
// Shapes: φq, φk: [k, S, M]; v: [k, S, d]; Front numerator [k, M, d], denominator [k, M].
// All functions are differentiable with respect to φq, φk, v and the incoming front.
// Thread safety: pure functions of their tensors.
#ifndef SLIMFIT_PERFORMER_PREFIX_ATTENTION_H_
#define SLIMFIT_PERFORMER_PREFIX_ATTENTION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "performer/packed_batch.h"
#include "performer/plan.h"

namespace slimfit::performer {

// The prefix-sum state of one layer between two stretches: U in the notation of Likhosherstov et al.
struct Front {
  at::Tensor numerator;    // [k, M, d]: Σ φk ⊗ v
  at::Tensor denominator;  // [k, M]:    Σ φk
};

struct PrefixAttentionResult {
  at::Tensor numerator;    // [k, S, d]
  at::Tensor denominator;  // [k, S]
  Front end;               // the front after the last row
};

// REQUIRES: segments cover [0, S) in order with coordinates relative to the stretch; only the
// first may have continues_front; block > 0 for kChunked.
PrefixAttentionResult CausalPrefixAttention(const at::Tensor& phi_q, const at::Tensor& phi_k,
                                            const at::Tensor& v, const Front& start,
                                            const std::vector<Segment>& segments, PrefixMode mode,
                                            int64_t block);

// The chunked prefix sums of one segment without autograd (the fused CPU kernels of
// prefix_attention_cpu.h where they apply, LibTorch's ops otherwise): for callers that
// back-propagate by hand. REQUIRES: shapes as above, block ≥ 1; the result's numerator is [k, S, d],
// its denominator [k, S], `end` the front after the last row.
PrefixAttentionResult ChunkedPrefixForward(const at::Tensor& phi_q, const at::Tensor& phi_k,
                                           const at::Tensor& v, const Front& start, int64_t block);

struct PrefixGradients {
  at::Tensor phi_q, phi_k, v;  // [k, S, M], [k, S, M], [k, S, d]
  Front start;                 // of the segment's start front
};

// The gradients of ChunkedPrefixForward's inputs given those of its outputs (all defined).
PrefixGradients ChunkedPrefixBackward(const at::Tensor& phi_q, const at::Tensor& phi_k, const at::Tensor& v,
                                      const Front& start, int64_t block, const at::Tensor& grad_numerator,
                                      const at::Tensor& grad_denominator, const Front& grad_end);

// Σ over the rows of φk ⊗ v and of φk: what a stretch without document starts adds to the front.
Front FrontContribution(const at::Tensor& phi_k, const at::Tensor& v);

// after − FrontContribution(φk, v): the front before a stretch without document starts, given the
// one after it (Likhosherstov et al., eq. 9). No autograd graph: call it on detached tensors.
Front FrontWithout(const Front& after, const at::Tensor& phi_k, const at::Tensor& v);

// A zero front for one layer.
Front ZeroFront(int64_t heads, int64_t features, int64_t head_dim, const at::TensorOptions& options);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PREFIX_ATTENTION_H_
