#include "performer/prefix_attention_blocks.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "performer/prefix_shapes.h"

namespace slimfit::performer {
namespace {

std::atomic<bool> block_parallel_enabled{true};

// One group of blocks: rows [begin, begin + rows) cut into `blocks` blocks of `block` rows, the
// last padded with zero rows (a zero φk and v add nothing to a front; a zero φq reads nothing).
struct Group {
  int64_t begin, rows, blocks;
};

std::vector<Group> Groups(int64_t total_rows, int64_t block) {
  std::vector<Group> groups;
  const int64_t group_rows = block * kBlocksPerGroup;
  for (int64_t begin = 0; begin < total_rows; begin += group_rows) {
    const int64_t rows = std::min(group_rows, total_rows - begin);
    groups.push_back(Group{begin, rows, (rows + block - 1) / block});
  }
  return groups;
}

// Rows of a [k, S, X] (or [k, S]) tensor as [k·blocks, block, X] (or [k·blocks, block]).
at::Tensor Blocked(const at::Tensor& t, const Group& g, int64_t block) {
  at::Tensor rows = t.narrow(1, g.begin, g.rows);
  const int64_t pad = g.blocks * block - g.rows;
  if (pad > 0) {
    rows = t.dim() == 3 ? at::constant_pad_nd(rows, {0, 0, 0, pad}) : at::constant_pad_nd(rows, {0, pad});
  }
  if (t.dim() == 3) return rows.reshape({t.size(0) * g.blocks, block, t.size(2)});
  return rows.reshape({t.size(0) * g.blocks, block});
}

// Along dim 1 of a [k, blocks, ...] tensor: element j becomes element j − 1, element 0 zero.
at::Tensor ShiftLater(const at::Tensor& t) {
  const int64_t n = t.size(1);
  return at::cat({at::zeros_like(t.narrow(1, 0, 1)), t.narrow(1, 0, n - 1)}, 1);
}

// Along dim 1: element j becomes element j + 1, the last zero.
at::Tensor ShiftEarlier(const at::Tensor& t) {
  const int64_t n = t.size(1);
  return at::cat({t.narrow(1, 1, n - 1), at::zeros_like(t.narrow(1, 0, 1))}, 1);
}

// A group's block products and block-start fronts.
struct Starts {
  at::Tensor numerator;        // [k·blocks, M, d]: R_j
  at::Tensor denominator;      // [k·blocks, M]:    Z_j
  at::Tensor sum_numerator;    // [k, M, d]: Σ_j K_jᵀ V_j
  at::Tensor sum_denominator;  // [k, M]
};

Starts BlockStarts(const at::Tensor& kb, const at::Tensor& vb, const at::Tensor& r, const at::Tensor& z,
                   int64_t heads, int64_t blocks) {
  const int64_t features = kb.size(2), dim = vb.size(2);
  const at::Tensor products = at::bmm(kb.transpose(1, 2), vb).view({heads, blocks, features, dim});
  const at::Tensor sums = kb.sum(1).view({heads, blocks, features});
  const at::Tensor through_numerator = products.cumsum(1);  // Σ_{j' ≤ j}
  const at::Tensor through_denominator = sums.cumsum(1);
  Starts s;
  s.numerator = ShiftLater(through_numerator).add_(r.unsqueeze(1)).view({heads * blocks, features, dim});
  s.denominator = ShiftLater(through_denominator).add_(z.unsqueeze(1)).view({heads * blocks, features});
  s.sum_numerator = through_numerator.select(1, blocks - 1);
  s.sum_denominator = through_denominator.select(1, blocks - 1);
  return s;
}

// Writes a group's [k·blocks, block, X] (or [k·blocks, block]) result into its rows of `out`
// ([k, S, X] or [k, S]), dropping the padding.
void Store(const at::Tensor& blocked, const Group& g, at::Tensor& out) {
  const int64_t heads = out.size(0);
  at::Tensor rows = out.dim() == 3 ? blocked.reshape({heads, -1, out.size(2)}) : blocked.reshape({heads, -1});
  out.narrow(1, g.begin, g.rows).copy_(rows.narrow(1, 0, g.rows));
}

}  // namespace

void EnableBlockParallelPrefix(bool enabled) {
  block_parallel_enabled.store(enabled, std::memory_order_relaxed);
}

bool BlockParallelPrefixEnabled() { return block_parallel_enabled.load(std::memory_order_relaxed); }

BlockPrefixForward BlockParallelPrefixForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
  CheckPrefixShapes("prefix sums", q, k, v, r0, z0, block);
  TORCH_CHECK(q.size(1) >= 1, "prefix sums: the block-parallel form needs at least one row");
  const int64_t heads = q.size(0), total = q.size(1);
  const std::vector<Group> groups = Groups(total, block);
  // One unpadded group writes straight into the results; otherwise each group's rows are copied
  // in. Either way the results are tensors of their own, not views (an autograd function's outputs
  // that are views cannot be modified in place later).
  const bool whole = groups.size() == 1 && groups[0].blocks * block == total;
  BlockPrefixForward out;
  out.numerator = at::empty({heads, total, v.size(2)}, v.options());
  out.denominator = at::empty({heads, total}, q.options());
  at::Tensor r = r0;
  at::Tensor z = z0;
  for (const Group& g : groups) {
    const at::Tensor qb = Blocked(q, g, block), kb = Blocked(k, g, block), vb = Blocked(v, g, block);
    const Starts starts = BlockStarts(kb, vb, r, z, heads, g.blocks);
    const at::Tensor scores = at::bmm(qb, kb.transpose(1, 2)).tril_();
    if (whole) {
      at::Tensor numerator = out.numerator.view({heads * g.blocks, block, v.size(2)});
      at::baddbmm_out(numerator, at::bmm(qb, starts.numerator), scores, vb);
      at::Tensor denominator = out.denominator.view({heads * g.blocks, block, 1});
      at::bmm_out(denominator, qb, starts.denominator.unsqueeze(2));
      denominator.squeeze(2).add_(scores.sum(2));
    } else {
      Store(at::baddbmm(at::bmm(qb, starts.numerator), scores, vb), g, out.numerator);
      Store(at::bmm(qb, starts.denominator.unsqueeze(2)).squeeze(2).add_(scores.sum(2)), g, out.denominator);
    }
    r = r + starts.sum_numerator;
    z = z + starts.sum_denominator;
  }
  out.end_numerator = std::move(r);
  out.end_denominator = std::move(z);
  return out;
}

BlockPrefixGradients BlockParallelPrefixBackward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& r0, const at::Tensor& z0,
    int64_t block, const at::Tensor& grad_numerator, const at::Tensor& grad_denominator,
    const at::Tensor& grad_end_numerator, const at::Tensor& grad_end_denominator) {
  CheckPrefixShapes("prefix sums", q, k, v, r0, z0, block);
  TORCH_CHECK(q.size(1) >= 1, "prefix sums: the block-parallel form needs at least one row");
  CheckPrefixGradientShapes("prefix sums backward", q, v, r0, z0, grad_numerator, grad_denominator,
                            grad_end_numerator, grad_end_denominator);
  const int64_t heads = q.size(0), total = q.size(1);
  const std::vector<Group> groups = Groups(total, block);

  // The front entering each group (one product per group; none for a single group).
  std::vector<std::pair<at::Tensor, at::Tensor>> group_starts = {{r0, z0}};
  for (size_t i = 0; i + 1 < groups.size(); ++i) {
    const at::Tensor kg = k.narrow(1, groups[i].begin, groups[i].rows);
    const at::Tensor vg = v.narrow(1, groups[i].begin, groups[i].rows);
    const auto& [r, z] = group_starts.back();
    group_starts.emplace_back(at::baddbmm(r, kg.transpose(1, 2), vg), z + kg.sum(1));
  }

  BlockPrefixGradients grads;
  grads.q = at::empty_like(q);
  grads.k = at::empty_like(k);
  grads.v = at::empty_like(v);
  at::Tensor dr = grad_end_numerator;  // the gradient of the front after the current group
  at::Tensor dz = grad_end_denominator;
  for (int64_t i = static_cast<int64_t>(groups.size()) - 1; i >= 0; --i) {
    const Group& g = groups[i];
    const at::Tensor qb = Blocked(q, g, block), kb = Blocked(k, g, block), vb = Blocked(v, g, block);
    const at::Tensor gn = Blocked(grad_numerator, g, block), gd = Blocked(grad_denominator, g, block);
    const Starts starts = BlockStarts(kb, vb, group_starts[i].first, group_starts[i].second, heads, g.blocks);
    const int64_t features = q.size(2), dim = v.size(2);

    const at::Tensor scores = at::bmm(qb, kb.transpose(1, 2)).tril_();
    const at::Tensor dscores = at::bmm(gn, vb.transpose(1, 2)).add_(gd.unsqueeze(2)).tril_();
    // dQ = gN Rᵀ + gD Zᵀ + dA K
    at::Tensor dq = at::baddbmm(at::bmm(gn, starts.numerator.transpose(1, 2)), dscores, kb);
    dq.add_(gd.unsqueeze(2) * starts.denominator.unsqueeze(1));
    // Each block's own use of its start front, then the gradient of the front after each block:
    // the group's outgoing gradient plus every later block's use.
    const at::Tensor used_numerator = at::bmm(qb.transpose(1, 2), gn).view({heads, g.blocks, features, dim});
    const at::Tensor used_denominator =
        at::bmm(qb.transpose(1, 2), gd.unsqueeze(2)).view({heads, g.blocks, features});
    const at::Tensor from_numerator = used_numerator.flip({1}).cumsum(1).flip({1});  // Σ_{j' ≥ j}
    const at::Tensor from_denominator = used_denominator.flip({1}).cumsum(1).flip({1});
    const at::Tensor after_numerator =
        ShiftEarlier(from_numerator).add_(dr.unsqueeze(1)).view({heads * g.blocks, features, dim});
    const at::Tensor after_denominator =
        ShiftEarlier(from_denominator).add_(dz.unsqueeze(1)).view({heads * g.blocks, features});
    // dK = dAᵀ Q + V dRᵀ + dZ;  dV = Aᵀ gN + K dR
    at::Tensor dk = at::baddbmm(at::bmm(dscores.transpose(1, 2), qb), vb, after_numerator.transpose(1, 2));
    dk.add_(after_denominator.unsqueeze(1));
    const at::Tensor dv = at::baddbmm(at::bmm(scores.transpose(1, 2), gn), kb, after_numerator);
    Store(dq, g, grads.q);
    Store(dk, g, grads.k);
    Store(dv, g, grads.v);
    dr = dr + from_numerator.select(1, 0);
    dz = dz + from_denominator.select(1, 0);
  }
  grads.r0 = std::move(dr);
  grads.z0 = std::move(dz);
  return grads;
}

}  // namespace slimfit::performer
