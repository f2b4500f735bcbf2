// The chunked causal prefix sums (prefix_attention.h, PrefixMode::kChunked) with every block of a
// group computed at once: the form for devices where each LibTorch call is a kernel launch (CUDA).
//
// The block-by-block form issues about 8 calls per block forwards and 20 backwards, so a segment
// of S rows costs ~28·S/b launches per layer whatever the arithmetic: at L = 4,096 and b = 64 that
// is ~3,600 launches for two layers, most of an H100's time on a small model. Here a group of up to
// kBlocksPerGroup blocks is a fixed ~19 batched calls forwards and ~40 backwards:
//   per block j:   S_j = K_jᵀ V_j,  z_j = K_jᵀ·1                         (one batched product)
//   block starts:  R_j = R_start + Σ_{j'<j} S_j',  Z_j likewise          (an exclusive cumsum)
//   outputs:       num_j = Q_j R_j + tril(Q_j K_jᵀ) V_j,  den_j = Q_j Z_j + tril(Q_j K_jᵀ)·1
// and backwards, with dR_j the gradient of the front *after* block j:
//   dR_j = dR_end + Σ_{j'>j} Q_j'ᵀ gN_j'                                 (a reverse exclusive cumsum)
// then the per-block equations of ChunkedPrefixFunction (prefix_attention.cc), all blocks at once.
// Results equal the block-by-block form's to rounding (the front is summed in another order).
//
// Memory: a group holds several arrays of G·k·M·d values at once (block products, their cumsum,
// block starts; backwards also the per-block front gradients and their suffix sums; G ≤
// kBlocksPerGroup) and the G·k·b² intra-block scores, where the block-by-block form holds one front
// forwards and every block start of the segment backwards. Measured on an H100: working memory
// 0–5% above block by block (BENCHMARKS.md). A segment is cut into groups so that this stays bounded
// for long segments; groups run in order, carrying the front.
//
// Shapes as in prefix_attention.h: φq, φk [k, S, M], v [k, S, d], front [k, M, d] and [k, M]; any
// device and floating dtype; rows need not be contiguous. No autograd graph is recorded (callers
// wrap these in an autograd function or back-propagate by hand).
// Thread safety: pure functions of their tensors.
#ifndef SLIMFIT_PERFORMER_PREFIX_ATTENTION_BLOCKS_H_
#define SLIMFIT_PERFORMER_PREFIX_ATTENTION_BLOCKS_H_

#include <ATen/ATen.h>

#include <cstdint>

namespace slimfit::performer {

// Blocks computed together; a segment of more blocks runs as several groups.
inline constexpr int64_t kBlocksPerGroup = 64;

// Whether prefix_attention.cc takes this form on devices other than the CPU (the default) or walks
// the blocks one by one there too, so that benchmarks can compare the two. Thread safety: an atomic
// flag; do not flip it while a prefix sum runs (its backward would take the other form — equal
// results, different speed).
void EnableBlockParallelPrefix(bool enabled);
bool BlockParallelPrefixEnabled();

struct BlockPrefixForward {
  at::Tensor numerator;      // [k, S, d]
  at::Tensor denominator;    // [k, S]
  at::Tensor end_numerator;  // [k, M, d]
  at::Tensor end_denominator;
};

// REQUIRES: shapes as above, S ≥ 1, block ≥ 1 (else a c10::Error).
BlockPrefixForward BlockParallelPrefixForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              const at::Tensor& r0, const at::Tensor& z0, int64_t block);

struct BlockPrefixGradients {
  at::Tensor q, k, v;  // [k, S, M], [k, S, M], [k, S, d]
  at::Tensor r0, z0;   // of the start front
};

// The gradients of BlockParallelPrefixForward's inputs given those of its four outputs (all
// defined). The block starts are rebuilt from (r0, z0), as the block-by-block backward does.
BlockPrefixGradients BlockParallelPrefixBackward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& r0, const at::Tensor& z0,
    int64_t block, const at::Tensor& grad_numerator, const at::Tensor& grad_denominator,
    const at::Tensor& grad_end_numerator, const at::Tensor& grad_end_denominator);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PREFIX_ATTENTION_BLOCKS_H_
