#include "performer/prefix_attention.h"

#include <torch/csrc/autograd/autograd.h>
#include <gtest/gtest.h>

namespace slimfit::performer {
namespace {

// The defining sums, one row at a time.
PrefixAttentionResult Naive(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Front& start) {
  at::Tensor r = start.numerator;
  at::Tensor z = start.denominator;
  std::vector<at::Tensor> num, den;
  for (int64_t l = 0; l < q.size(1); ++l) {
    r = r + k.select(1, l).unsqueeze(2) * v.select(1, l).unsqueeze(1);
    z = z + k.select(1, l);
    num.push_back(at::matmul(q.select(1, l).unsqueeze(1), r).squeeze(1));
    den.push_back((q.select(1, l) * z).sum(1));
  }
  return {at::stack(num, 1), at::stack(den, 1), Front{r, z}};
}

TEST(PrefixAttentionTest, BothModesMatchTheDefinitionAndEachOthersGradients) {
  at::manual_seed(3);
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const int64_t heads = 2, rows = 11, features = 3, dim = 4;
  at::Tensor q = at::rand({heads, rows, features}, options).requires_grad_();
  at::Tensor k = at::rand({heads, rows, features}, options).requires_grad_();
  at::Tensor v = at::randn({heads, rows, dim}, options).requires_grad_();
  at::Tensor r0 = at::rand({heads, features, dim}, options).requires_grad_();
  at::Tensor z0 = at::rand({heads, features}, options).requires_grad_();
  const std::vector<Segment> one = {Segment{0, rows, true}};
  const PrefixAttentionResult want = Naive(q, k, v, Front{r0, z0});
  const at::Tensor weights_num = at::randn({heads, rows, dim}, options);
  const at::Tensor weights_den = at::randn({heads, rows}, options);
  const at::Tensor weights_r = at::randn({heads, features, dim}, options);
  const at::Tensor weights_z = at::randn({heads, features}, options);
  auto objective = [&](const PrefixAttentionResult& p) {
    return (p.numerator * weights_num).sum() + (p.denominator * weights_den).sum() +
           (p.end.numerator * weights_r).sum() + (p.end.denominator * weights_z).sum();
  };
  const auto want_grads = torch::autograd::grad({objective(want)}, {q, k, v, r0, z0});
  for (auto [mode, block] : {std::pair{PrefixMode::kCumsum, int64_t{1}}, {PrefixMode::kChunked, int64_t{1}},
                             {PrefixMode::kChunked, int64_t{4}}, {PrefixMode::kChunked, int64_t{11}},
                             {PrefixMode::kChunked, int64_t{64}}}) {
    const PrefixAttentionResult got = CausalPrefixAttention(q, k, v, Front{r0, z0}, one, mode, block);
    EXPECT_TRUE(at::allclose(got.numerator, want.numerator, 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(got.denominator, want.denominator, 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(got.end.numerator, want.end.numerator, 1e-12, 1e-12));
    const auto grads = torch::autograd::grad({objective(got)}, {q, k, v, r0, z0});
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_TRUE(at::allclose(grads[i], want_grads[i], 1e-10, 1e-12)) << "input " << i << " block " << block;
    }
  }
}

TEST(PrefixAttentionTest, SegmentsRestartFromZero) {
  const auto options = at::TensorOptions().dtype(at::kDouble);
  at::Tensor q = at::rand({1, 6, 2}, options), k = at::rand({1, 6, 2}, options), v = at::rand({1, 6, 3}, options);
  const Front start{at::rand({1, 2, 3}, options), at::rand({1, 2}, options)};
  const std::vector<Segment> segments = {Segment{0, 2, true}, Segment{2, 6, false}};
  const PrefixAttentionResult got = CausalPrefixAttention(q, k, v, start, segments, PrefixMode::kChunked, 3);
  const Front zero{at::zeros({1, 2, 3}, options), at::zeros({1, 2}, options)};
  const PrefixAttentionResult tail = Naive(q.narrow(1, 2, 4), k.narrow(1, 2, 4), v.narrow(1, 2, 4), zero);
  EXPECT_TRUE(at::allclose(got.numerator.narrow(1, 2, 4), tail.numerator));
  EXPECT_TRUE(at::allclose(got.end.denominator, tail.end.denominator));
  const PrefixAttentionResult head = Naive(q.narrow(1, 0, 2), k.narrow(1, 0, 2), v.narrow(1, 0, 2), start);
  EXPECT_TRUE(at::allclose(got.denominator.narrow(1, 0, 2), head.denominator));
}

}  // namespace
}  // namespace slimfit::performer
