#include "performer/prefix_attention.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <utility>

#include "performer/prefix_attention_blocks.h"
#include "performer/prefix_attention_cpu.h"
#include "performer/prefix_attention_cuda.h"

namespace slimfit::performer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows [begin, end) of a [k, S, ...] tensor.
at::Tensor Rows(const at::Tensor& t, int64_t begin, int64_t end) { return t.narrow(1, begin, end - begin); }

// Forward, for block j with rows Q, K, V and block-start front (R, Z):
//   A = tril(Q Kᵀ);  num = Q R + A V;  den = Q Z + A·1;  R += Kᵀ V;  Z += Kᵀ·1.
// Backward walks the blocks in reverse with dR, dZ the gradients of the front after block j:
//   dA = tril(gN Vᵀ + gD·1ᵀ);  dQ = gN Rᵀ + gD Zᵀ + dA K;  dK = dAᵀ Q + V dRᵀ + 1·dZᵀ;
//   dV = Aᵀ gN + K dR;  then dR += Qᵀ gN, dZ += Qᵀ gD (the gradient of the block-start front).
// The block-start fronts are rebuilt forwards from the saved start front (exact, no subtraction).
// ChunkedPrefixFunction wraps the two for autograd; it saves only φq, φk, v and the start front.
class ChunkedPrefixFunction : public torch::autograd::Function<ChunkedPrefixFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& r0, const at::Tensor& z0,
                               int64_t block) {
    ctx->save_for_backward({q, k, v, r0, z0});
    ctx->saved_data["block"] = block;
    PrefixAttentionResult out = ChunkedPrefixForward(q, k, v, Front{r0, z0}, block);
    return {out.numerator, out.denominator, out.end.numerator, out.end.denominator};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    auto defined_or_zeros = [](const at::Tensor& g, const at::Tensor& like) {
      return g.defined() ? g : at::zeros_like(like);
    };
    PrefixGradients g = ChunkedPrefixBackward(
        saved[0], saved[1], saved[2], Front{saved[3], saved[4]}, ctx->saved_data["block"].toInt(),
        defined_or_zeros(grads[0], saved[2]), defined_or_zeros(grads[1], saved[0].select(2, 0)),
        Front{defined_or_zeros(grads[2], saved[3]), defined_or_zeros(grads[3], saved[4])});
    return {g.phi_q, g.phi_k, g.v, g.start.numerator, g.start.denominator, at::Tensor()};
  }
};

// Prefix attention for one segment by materialising every prefix state.
PrefixAttentionResult CumsumSegment(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const Front& start) {
  // states[h, l] = R_start + Σ_{l' ≤ l} k_l' ⊗ v_l'   : [k, S, M, d]
  const at::Tensor states = at::cumsum(k.unsqueeze(3) * v.unsqueeze(2), 1) + start.numerator.unsqueeze(1);
  const at::Tensor norms = at::cumsum(k, 1) + start.denominator.unsqueeze(1);  // [k, S, M]
  PrefixAttentionResult result;
  result.numerator = at::matmul(q.unsqueeze(2), states).squeeze(2);
  result.denominator = (q * norms).sum(2);
  const int64_t last = q.size(1) - 1;
  result.end = Front{states.select(1, last), norms.select(1, last)};
  return result;
}

PrefixAttentionResult RunSegment(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const Front& start, PrefixMode mode, int64_t block) {
  if (mode == PrefixMode::kCumsum) return CumsumSegment(q, k, v, start);
  variable_list out = ChunkedPrefixFunction::apply(q, k, v, start.numerator, start.denominator, block);
  return PrefixAttentionResult{out[0], out[1], Front{out[2], out[3]}};
}

// Whether a segment takes the block-parallel form (prefix_attention_blocks.h): off the CPU, for
// three blocks or more. A segment of one or two blocks is fewer kernels block by block: on an H100
// at config A, slices of one block (C ≤ 64) took 15–31% longer in the block-parallel form, two
// blocks within 7%, four 30% faster (BENCHMARKS.md, "What does an H100 do at config A and at a GPU-sized
// model?").
bool BlockParallel(const at::Tensor& q, int64_t block) {
  return !q.device().is_cpu() && BlockParallelPrefixEnabled() && q.size(1) > 2 * block;
}

}  // namespace

PrefixAttentionResult ChunkedPrefixForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const Front& start, int64_t block) {
  const at::Tensor& r0 = start.numerator;
  const at::Tensor& z0 = start.denominator;
  if (FusedPrefixApplies(q, k, v, r0, z0)) {
    FusedPrefixForward out = FusedPrefixForwardCpu(q, k, v, r0, z0, block);
    return {out.numerator, out.denominator, Front{out.end_numerator, out.end_denominator}};
  }
  if (FusedCudaPrefixApplies(q, k, v, r0, z0, block)) {
    FusedPrefixForward out = FusedPrefixForwardCuda(q, k, v, r0, z0, block);
    return {out.numerator, out.denominator, Front{out.end_numerator, out.end_denominator}};
  }
  if (BlockParallel(q, block)) {
    BlockPrefixForward out = BlockParallelPrefixForward(q, k, v, r0, z0, block);
    return {out.numerator, out.denominator, Front{out.end_numerator, out.end_denominator}};
  }
  at::Tensor r = r0;
  at::Tensor z = z0;
  const int64_t rows = q.size(1);
  std::vector<at::Tensor> numerators;
  std::vector<at::Tensor> denominators;
  for (int64_t begin = 0; begin < rows; begin += block) {
    const int64_t end = std::min(rows, begin + block);
    const at::Tensor qb = Rows(q, begin, end);
    const at::Tensor kb = Rows(k, begin, end);
    const at::Tensor vb = Rows(v, begin, end);
    const at::Tensor scores = at::bmm(qb, kb.transpose(1, 2)).tril_();
    numerators.push_back(at::baddbmm(at::bmm(qb, r), scores, vb));
    denominators.push_back(at::baddbmm(scores.sum(2, /*keepdim=*/true), qb, z.unsqueeze(2)).squeeze(2));
    r = at::baddbmm(r, kb.transpose(1, 2), vb);
    z = z + kb.sum(1);
  }
  if (numerators.size() == 1) return {numerators[0], denominators[0], Front{r, z}};  // no copy for one block
  return {at::cat(numerators, 1), at::cat(denominators, 1), Front{r, z}};
}

PrefixGradients ChunkedPrefixBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const Front& start, int64_t block, const at::Tensor& grad_num,
                                      const at::Tensor& grad_den, const Front& grad_end) {
  if (FusedPrefixApplies(q, k, v, start.numerator, start.denominator)) {
    FusedPrefixGradients g =
        FusedPrefixBackwardCpu(q, k, v, start.numerator, start.denominator, block, grad_num, grad_den,
                               grad_end.numerator, grad_end.denominator);
    return {g.q, g.k, g.v, Front{g.r0, g.z0}};
  }
  if (FusedCudaPrefixBackwardApplies(q, k, v, start.numerator, start.denominator, block, grad_num, grad_den,
                                     grad_end.numerator, grad_end.denominator)) {
    FusedPrefixGradients g =
        FusedPrefixBackwardCuda(q, k, v, start.numerator, start.denominator, block, grad_num, grad_den,
                                grad_end.numerator, grad_end.denominator);
    return {g.q, g.k, g.v, Front{g.r0, g.z0}};
  }
  if (BlockParallel(q, block)) {
    BlockPrefixGradients g =
        BlockParallelPrefixBackward(q, k, v, start.numerator, start.denominator, block, grad_num, grad_den,
                                    grad_end.numerator, grad_end.denominator);
    return {g.q, g.k, g.v, Front{g.r0, g.z0}};
  }
  // Off the fused paths every LibTorch call is a kernel launch on a GPU (a C = 16 slice is launch
  // bound there): products absorb the additions they can (baddbmm with a broadcast input, outer
  // products as batched products of [S, 1] and [1, M]), the fronts are updated out of place rather
  // than cloned, and a single block's gradients are returned without copies.
  const int64_t rows = q.size(1);
  const int64_t blocks = (rows + block - 1) / block;
  if (blocks == 0) {  // no rows: nothing to differentiate; the start front's gradient is the end's
    return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v),
            Front{grad_end.numerator.clone(), grad_end.denominator.clone()}};
  }
  // Block-start fronts, rebuilt forwards (the front after the last block is never needed).
  std::vector<std::pair<at::Tensor, at::Tensor>> starts = {{start.numerator, start.denominator}};
  for (int64_t j = 0; j + 1 < blocks; ++j) {
    const at::Tensor kb = Rows(k, j * block, (j + 1) * block);
    const auto& [r, z] = starts.back();
    starts.emplace_back(at::baddbmm(r, kb.transpose(1, 2), Rows(v, j * block, (j + 1) * block)),
                        z + kb.sum(1));
  }

  at::Tensor dr = grad_end.numerator;  // the gradient of the front after block j
  at::Tensor dz = grad_end.denominator;
  const bool one_block = blocks == 1;
  at::Tensor dq, dk, dv;
  if (!one_block) {
    dq = at::empty_like(q);
    dk = at::empty_like(k);
    dv = at::empty_like(v);
  }
  for (int64_t j = blocks - 1; j >= 0; --j) {
    const int64_t begin = j * block;
    const int64_t end = std::min(rows, begin + block);
    const at::Tensor qb = Rows(q, begin, end);
    const at::Tensor kb = Rows(k, begin, end);
    const at::Tensor vb = Rows(v, begin, end);
    const at::Tensor gn = Rows(grad_num, begin, end);
    const at::Tensor gd = Rows(grad_den, begin, end).unsqueeze(2);  // [k, rows, 1]
    const auto& [r, z] = starts[j];

    const at::Tensor scores = at::bmm(qb, kb.transpose(1, 2)).tril_();
    const at::Tensor dscores = at::baddbmm(gd, gn, vb.transpose(1, 2)).tril_();
    // dQ = gN Rᵀ + gD Zᵀ + dA K
    at::Tensor dqb = at::baddbmm(at::bmm(gn, r.transpose(1, 2)), dscores, kb);
    dqb.baddbmm_(gd, z.unsqueeze(1));
    // dK = dAᵀ Q + V dRᵀ + dZ
    at::Tensor dkb = at::baddbmm(at::bmm(dscores.transpose(1, 2), qb), vb, dr.transpose(1, 2));
    dkb.add_(dz.unsqueeze(1));
    // dV = Aᵀ gN + K dR
    at::Tensor dvb = at::baddbmm(at::bmm(scores.transpose(1, 2), gn), kb, dr);
    if (one_block) {
      dq = std::move(dqb);
      dk = std::move(dkb);
      dv = std::move(dvb);
    } else {
      Rows(dq, begin, end).copy_(dqb);
      Rows(dk, begin, end).copy_(dkb);
      Rows(dv, begin, end).copy_(dvb);
    }
    dr = at::baddbmm(dr, qb.transpose(1, 2), gn);
    dz = at::baddbmm(dz.unsqueeze(2), qb.transpose(1, 2), gd).squeeze(2);
  }
  return {dq, dk, dv, Front{dr, dz}};
}

Front ZeroFront(int64_t heads, int64_t features, int64_t head_dim, const at::TensorOptions& options) {
  return Front{at::zeros({heads, features, head_dim}, options), at::zeros({heads, features}, options)};
}

Front FrontContribution(const at::Tensor& phi_k, const at::Tensor& v) {
  return Front{at::bmm(phi_k.transpose(1, 2), v), phi_k.sum(1)};
}

Front FrontWithout(const Front& after, const at::Tensor& phi_k, const at::Tensor& v) {
  if (FusedPrefixApplies(phi_k, phi_k, v, after.numerator, after.denominator)) {
    FusedFront front = FusedFrontWithoutCpu(after.numerator, after.denominator, phi_k, v);
    return Front{front.numerator, front.denominator};
  }
  if (FusedCudaFrontWithoutApplies(after.numerator, after.denominator, phi_k, v)) {
    FusedFront front = FusedFrontWithoutCuda(after.numerator, after.denominator, phi_k, v);
    return Front{front.numerator, front.denominator};
  }
  const Front added = FrontContribution(phi_k, v);
  return Front{after.numerator - added.numerator, after.denominator - added.denominator};
}

PrefixAttentionResult CausalPrefixAttention(const at::Tensor& phi_q, const at::Tensor& phi_k,
                                            const at::Tensor& v, const Front& start,
                                            const std::vector<Segment>& segments, PrefixMode mode,
                                            int64_t block) {
  if (segments.size() == 1) {  // the common case: one document across the stretch, no copies
    const Front origin = segments[0].continues_front
                             ? start
                             : Front{at::zeros_like(start.numerator), at::zeros_like(start.denominator)};
    return RunSegment(phi_q, phi_k, v, origin, mode, block);
  }
  std::vector<at::Tensor> numerators;
  std::vector<at::Tensor> denominators;
  Front end;
  for (const auto& segment : segments) {
    const Front origin = segment.continues_front
                             ? start
                             : Front{at::zeros_like(start.numerator), at::zeros_like(start.denominator)};
    PrefixAttentionResult part =
        RunSegment(Rows(phi_q, segment.begin, segment.end), Rows(phi_k, segment.begin, segment.end),
                   Rows(v, segment.begin, segment.end), origin, mode, block);
    numerators.push_back(std::move(part.numerator));
    denominators.push_back(std::move(part.denominator));
    end = std::move(part.end);
  }
  return PrefixAttentionResult{at::cat(numerators, 1), at::cat(denominators, 1), std::move(end)};
}

}  // namespace slimfit::performer
