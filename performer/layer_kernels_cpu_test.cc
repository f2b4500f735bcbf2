// Each float32 layer kernel against the LibTorch computation it replaces, on random data with
// values far into the tails (GELU and exp at |x| up to 12), rows that are and are not split between
// threads, and every feature map it serves.
#include "performer/layer_kernels_cpu.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace slimfit::performer {
namespace {

at::Tensor Random(at::IntArrayRef shape, double scale, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  return (at::randn(shape, generator, at::TensorOptions().dtype(at::kFloat)) * scale).contiguous();
}

double MaxError(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
}

double MaxAbs(const at::Tensor& t) { return t.to(at::kDouble).abs().max().item<double>(); }

// 8 rows run on one thread; 512 rows of 3·256 values split between threads.
class LayerKernelsTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(LayerKernelsTest, EmbeddingAndItsBackwardMatchLibTorch) {
  const int64_t rows = GetParam(), d = 256, vocab = 50;
  const at::Tensor tokens = at::arange(rows, at::kLong).mul_(7).remainder_(vocab);  // tokens repeat
  const at::Tensor positions = at::arange(rows, at::kLong).mul_(13).remainder_(3000);
  const at::Tensor embedding = Random({vocab, d / 2}, 1.0, 18);
  const at::Tensor frequencies =
      at::exp(at::arange(0, d / 2, 2, at::kFloat) * (-std::log(10000.0) / (d / 2)));
  at::Tensor x0 = at::empty({rows, d});
  EmbedCpu(tokens, positions, embedding, frequencies, x0);
  const at::Tensor angles = positions.to(at::kDouble).unsqueeze(1) * frequencies.to(at::kDouble).unsqueeze(0);
  const at::Tensor want =
      at::cat({at::embedding(embedding.to(at::kDouble), tokens), at::sin(angles), at::cos(angles)}, 1);
  EXPECT_LE(MaxError(x0, want), 1e-3);  // angles up to 3000 rad carry float32's rounding of the angle
  EXPECT_TRUE(at::equal(x0.narrow(1, 0, d / 2), at::embedding(embedding, tokens)));

  const at::Tensor g = Random({rows, d}, 1.0, 19);
  at::Tensor sink = Random({vocab, d / 2}, 1.0, 20);
  const at::Tensor want_sink =
      sink.to(at::kDouble).index_add(0, tokens, g.to(at::kDouble).narrow(1, 0, d / 2));
  EmbedBackwardCpu(tokens, g, sink);
  EXPECT_LE(MaxError(sink, want_sink), 1e-5 * MaxAbs(want_sink));
  const at::Tensor bad = tokens.clone();
  bad[0] = vocab;
  EXPECT_THROW(EmbedCpu(bad, positions, embedding, frequencies, x0), c10::Error);
}

TEST_P(LayerKernelsTest, CrossEntropyAndItsGradientMatchLibTorch) {
  const int64_t rows = GetParam(), vocab = 256;
  const at::Tensor logits = Random({rows, vocab}, 4.0, 21);
  const at::Tensor targets = at::arange(rows, at::kLong).mul_(31).remainder_(vocab);
  at::Tensor log_probs = logits.clone();
  const double loss = LogSoftmaxCrossEntropyCpu(log_probs, targets);
  const at::Tensor want = at::log_softmax(logits.to(at::kDouble), 1);
  EXPECT_LE(MaxError(log_probs, want), 1e-5 * MaxAbs(want));
  const double want_loss = at::nll_loss(want, targets, {}, at::Reduction::Sum).item<double>();
  EXPECT_NEAR(loss, want_loss, 1e-6 * want_loss);

  at::Tensor g_logits = at::empty_like(logits);
  LogSoftmaxCrossEntropyBackwardCpu(log_probs, targets, 0.25f, g_logits);
  const at::Tensor leaf = logits.to(at::kDouble).requires_grad_(true);
  (at::nll_loss(at::log_softmax(leaf, 1), targets, {}, at::Reduction::Sum) * 0.25).backward();
  EXPECT_LE(MaxError(g_logits, leaf.grad()), 1e-6);

  at::Tensor target = Random({rows + 3, 8}, 1.0, 22);
  const at::Tensor source = Random({rows, 8}, 1.0, 23);
  const at::Tensor where = at::arange(rows, at::kLong).add_(2);
  const at::Tensor want_target = target.to(at::kDouble).index_add(0, where, source.to(at::kDouble));
  AddRowsCpu(where, source, target);
  EXPECT_LE(MaxError(target, want_target), 1e-6 * MaxAbs(want_target));
  EXPECT_THROW(AddRowsCpu(where.add(2), source, target), c10::Error);  // a row past the end
}

TEST_P(LayerKernelsTest, ColumnSumsAddToTheSink) {
  const int64_t rows = GetParam();
  const at::Tensor g = Random({rows, 300}, 1.0, 1);
  at::Tensor sink = Random({300}, 1.0, 2);
  const at::Tensor want = sink.to(at::kDouble) + g.to(at::kDouble).sum(0);
  AddColumnSumsCpu(sink, g);
  EXPECT_LE(MaxError(sink, want), 1e-6 * MaxAbs(want));
}

TEST_P(LayerKernelsTest, HeadsSplitAndFeaturesMatchLibTorch) {
  const int64_t rows = GetParam(), heads = 4, h = 64, d = heads * h;
  const at::Tensor qkv = Random({rows, 3 * d}, 1.5, 3);
  const at::Tensor split = qkv.view({rows, 3, heads, h}).permute({1, 2, 0, 3});
  for (FeatureMap map : {FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr}) {
    at::Tensor phi = at::empty({2, heads, rows, h});
    at::Tensor v = at::empty({heads, rows, h});
    SplitHeadsCpu(map, qkv, heads, phi, v);
    const at::Tensor raw = split.narrow(0, 0, 2);
    auto feature = [&](const at::Tensor& x) {
      return map == FeatureMap::kRelu ? at::relu(x) : map == FeatureMap::kElu1 ? at::elu(x) + 1 : x * x;
    };
    const at::Tensor want = feature(raw);
    EXPECT_LE(MaxError(phi, want), 1e-6 * MaxAbs(want)) << FeatureMapName(map);
    EXPECT_TRUE(at::equal(v, split.select(0, 2))) << FeatureMapName(map);

    // Backward against autograd's derivative of the same feature map.
    const at::Tensor g_q = Random({heads, rows, h}, 1.0, 4);
    const at::Tensor g_k = Random({heads, rows, h}, 1.0, 5);
    const at::Tensor g_v = Random({heads, rows, h}, 1.0, 6);
    at::Tensor g_qkv = at::empty({rows, 3 * d});
    JoinHeadGradientsCpu(map, qkv, g_q, g_k, g_v, g_qkv);
    const at::Tensor leaf = qkv.detach().requires_grad_(true);
    const at::Tensor leaf_split = leaf.view({rows, 3, heads, h}).permute({1, 2, 0, 3});
    const at::Tensor q = leaf_split.select(0, 0);
    const at::Tensor k = leaf_split.select(0, 1);
    const at::Tensor objective =
        (feature(q) * g_q).sum() + (feature(k) * g_k).sum() + (leaf_split.select(0, 2) * g_v).sum();
    objective.backward();
    EXPECT_LE(MaxError(g_qkv, leaf.grad()), 1e-6 * MaxAbs(leaf.grad())) << FeatureMapName(map);
  }
}

TEST_P(LayerKernelsTest, AttentionNormalisationAndItsBackwardMatchLibTorch) {
  const int64_t rows = GetParam(), heads = 4, h = 64;
  const at::Tensor num = Random({heads, rows, h}, 1.0, 7);
  const at::Tensor den = Random({heads, rows}, 1.0, 8).abs_().add_(0.5);
  at::Tensor den_eps = at::empty({heads, rows});
  at::Tensor attention = at::empty({rows, heads * h});
  NormalizeAttentionCpu(num, den, 1e-16, den_eps, attention);
  const at::Tensor want = (num / (den.unsqueeze(2) + 1e-16)).transpose(0, 1).reshape({rows, heads * h});
  EXPECT_LE(MaxError(attention, want), 1e-6 * MaxAbs(want));
  EXPECT_TRUE(at::equal(den_eps, den + 1e-16));

  const at::Tensor g_attention = Random({rows, heads * h}, 1.0, 9);
  at::Tensor g_num = at::empty({heads, rows, h});
  at::Tensor g_den = at::empty({heads, rows});
  NormalizeAttentionBackwardCpu(g_attention, attention, den_eps, g_num, g_den);
  const at::Tensor n = num.detach().requires_grad_(true);
  const at::Tensor z = den.detach().requires_grad_(true);
  const at::Tensor joined = (n / (z.unsqueeze(2) + 1e-16)).transpose(0, 1).reshape({rows, heads * h});
  (joined * g_attention).sum().backward();
  EXPECT_LE(MaxError(g_num, n.grad()), 1e-6 * MaxAbs(n.grad()));
  EXPECT_LE(MaxError(g_den, z.grad()), 1e-5 * MaxAbs(z.grad()));
}

TEST_P(LayerKernelsTest, LayerNormAndItsBackwardMatchLibTorch) {
  const int64_t rows = GetParam(), n = 256;
  const at::Tensor x = Random({rows, n}, 2.0, 12).add_(0.7);
  const at::Tensor weight = Random({n}, 1.0, 13), bias = Random({n}, 1.0, 14);
  at::Tensor y = at::empty_like(x), mean = at::empty({rows, 1}), rstd = at::empty({rows, 1});
  LayerNormCpu(x, weight, bias, 1e-5, y, mean, rstd);
  const auto [want, want_mean, want_rstd] =
      at::native_layer_norm(x.to(at::kDouble), {n}, weight.to(at::kDouble), bias.to(at::kDouble), 1e-5);
  EXPECT_LE(MaxError(y, want), 1e-6 * MaxAbs(want));
  EXPECT_LE(MaxError(mean, want_mean.view({rows, 1})), 1e-6 * MaxAbs(want_mean));
  EXPECT_LE(MaxError(rstd, want_rstd.view({rows, 1})), 1e-6 * MaxAbs(want_rstd));

  const at::Tensor g = Random({rows, n}, 1.0, 15);
  at::Tensor g_x = at::empty_like(x);
  at::Tensor sink_weight = Random({n}, 1.0, 16), sink_bias = Random({n}, 1.0, 17);
  const at::Tensor weight_before = sink_weight.to(at::kDouble), bias_before = sink_bias.to(at::kDouble);
  LayerNormBackwardCpu(g, x, mean, rstd, weight, g_x, sink_weight, sink_bias);
  const auto [want_gx, want_gw, want_gb] =
      at::native_layer_norm_backward(g.to(at::kDouble), x.to(at::kDouble), {n}, want_mean, want_rstd,
                                     weight.to(at::kDouble), bias.to(at::kDouble), {true, true, true});
  EXPECT_LE(MaxError(g_x, want_gx), 1e-5 * MaxAbs(want_gx));
  EXPECT_LE(MaxError(sink_weight, weight_before + want_gw), 1e-5 * MaxAbs(weight_before + want_gw));
  EXPECT_LE(MaxError(sink_bias, bias_before + want_gb), 1e-5 * MaxAbs(bias_before + want_gb));
}

TEST_P(LayerKernelsTest, GeluAndItsBackwardMatchLibTorch) {
  const int64_t rows = GetParam();
  at::Tensor u = Random({rows, 1024}, 3.0, 10);
  u[0][0] = 12.0f;  // the tails, where erf → ±1 and exp(−x²/2) underflows
  u[0][1] = -12.0f;
  u[0][2] = 0.0f;
  at::Tensor hidden = at::empty_like(u);
  GeluCpu(u, hidden);
  const at::Tensor want = at::gelu(u.to(at::kDouble));
  // Absolute error: the approximation's 1.5e-7 of erf, times |u| / 2, plus float32 rounding.
  EXPECT_LE(MaxError(hidden, want), 2e-6 * MaxAbs(want));
  const at::Tensor g = Random({rows, 1024}, 1.0, 11);
  at::Tensor g_u = at::empty_like(u);
  GeluBackwardCpu(g, u, g_u);
  const at::Tensor want_g = at::gelu_backward(g.to(at::kDouble), u.to(at::kDouble));
  EXPECT_LE(MaxError(g_u, want_g), 2e-6 * MaxAbs(want_g));
}

INSTANTIATE_TEST_SUITE_P(Rows, LayerKernelsTest, ::testing::Values(8, 512));

TEST(LayerKernelsScopeTest, TakesOnlyContiguousFloat32CpuTensors) {
  EXPECT_TRUE(LayerKernelsApply(at::zeros({4, 4})));
  EXPECT_FALSE(LayerKernelsApply(at::zeros({4, 4}, at::kDouble)));
  EXPECT_FALSE(LayerKernelsApply(at::zeros({4, 4}).t()));
  EXPECT_FALSE(LayerKernelsApply(at::Tensor()));
  at::Tensor sink = at::zeros({3});
  EXPECT_THROW(AddColumnSumsCpu(sink, at::zeros({2, 4})), c10::Error);
}

}  // namespace
}  // namespace slimfit::performer
