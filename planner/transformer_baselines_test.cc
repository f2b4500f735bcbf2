#include "planner/transformer_baselines.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "planner/transformer_baselines_testing.h"

namespace slimfit::planner {
namespace {

using transformer_testing::Equal;
using transformer_testing::ExpectInvalid;
using transformer_testing::kGiB;
using transformer_testing::Moments;
using transformer_testing::Shape;

constexpr AttentionLayout kAllLayouts[] = {AttentionLayout::kNaive, AttentionLayout::kFlash,
                                           AttentionLayout::kPaddingFree};
constexpr Recompute kAllRecomputes[] = {Recompute::kNone, Recompute::kAttention, Recompute::kFeedForward,
                                        Recompute::kFull};

LayerActivationBytes Layer(const TransformerShape& shape, const BatchSpec& batch, AttentionLayout layout) {
  absl::StatusOr<LayerActivationBytes> bytes = ComputeLayerActivations(shape, Moments(batch), layout);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : LayerActivationBytes{};
}

LayerForwardFlops Flops(const TransformerShape& shape, const BatchSpec& batch, AttentionLayout layout) {
  absl::StatusOr<LayerForwardFlops> flops = ComputeLayerForwardFlops(shape, Moments(batch), layout);
  EXPECT_TRUE(flops.ok()) << flops.status();
  return flops.ok() ? *flops : LayerForwardFlops{};
}

RecomputeCost Cost(const TransformerShape& shape, const BatchSpec& batch, AttentionLayout layout,
                   Recompute recompute) {
  return ComputeRecomputeCost(Layer(shape, batch, layout), Flops(shape, batch, layout), shape.layers,
                              recompute);
}

// ---- The per-layer formula of the checkpointing and padding-free articles ----------------------

TEST(TransformerBaselinesTest, NaiveLayerIsTheArticlesFormula34SBHPlus5aS2B) {
  struct Case {
    int64_t s, b, h, a;
  };
  for (const Case& c : {Case{512, 4, 1024, 16}, Case{4096, 1, 4096, 32}, Case{1, 1, 64, 1},
                        Case{2048, 8, 6144, 48}, Case{16384, 1, 4096, 32}}) {
    SCOPED_TRACE(testing::Message() << "S=" << c.s << " B=" << c.b << " H=" << c.h << " a=" << c.a);
    const double sbh = static_cast<double>(c.s) * c.b * c.h;
    const double as2b = static_cast<double>(c.a) * c.s * c.s * c.b;
    const LayerActivationBytes bytes = Layer(Shape(c.h, c.a), Equal(c.b, c.s), AttentionLayout::kNaive);
    EXPECT_EQ(bytes.total(), 34 * sbh + 5 * as2b);
    // The checkpointing article's breakdown: attention 11·SBH + 5aS²B, feed-forward 19·SBH,
    // layer norms 4·SBH.
    EXPECT_EQ(bytes.attention, 11 * sbh + 5 * as2b);
    EXPECT_EQ(bytes.attention_quadratic, 5 * as2b);
    EXPECT_EQ(bytes.feed_forward, 19 * sbh);
    EXPECT_EQ(bytes.layer_norm, 4 * sbh);
    EXPECT_EQ(bytes.layer_input, 2 * sbh);  // the seed's 1·SBH checkpoint, at 2 bytes
  }
}

TEST(TransformerBaselinesTest, BreakdownGeneralisesToFeedForwardWidthElementSizeAndDropout) {
  const int64_t s = 300, b = 3, h = 256, a = 4;
  const double sbh = static_cast<double>(s) * b * h;
  const double as2b = static_cast<double>(a) * s * s * b;
  const BatchSpec batch = Equal(b, s);
  // d_ff = 4h given explicitly is the default.
  EXPECT_EQ(Layer(Shape(h, a, 4 * h), batch, AttentionLayout::kNaive).total(),
            Layer(Shape(h, a), batch, AttentionLayout::kNaive).total());
  // d_ff = 8h: (p + 1)·h + 2p·f = 3h + 32h per token.
  EXPECT_EQ(Layer(Shape(h, a, 8 * h), batch, AttentionLayout::kNaive).feed_forward, 35 * sbh);
  // d_ff = h/2 (not a multiple of h): 3h + 2h.
  EXPECT_EQ(Layer(Shape(h, a, h / 2), batch, AttentionLayout::kNaive).feed_forward, 5 * sbh);
  // fp32 activations, 1-byte masks: layer norms 8, attention 21, MLP 37 → 66·SBH + 9·aS²B.
  EXPECT_EQ(Layer(Shape(h, a, 0, 4), batch, AttentionLayout::kNaive).total(), 66 * sbh + 9 * as2b);
  // No dropout: no masks, the softmax output is the only K² tensor: 4 + 10 + 18 = 32.
  const LayerActivationBytes no_dropout =
      Layer(Shape(h, a, 0, 2, /*dropout=*/false), batch, AttentionLayout::kNaive);
  EXPECT_EQ(no_dropout.total(), 32 * sbh + 2 * as2b);
  EXPECT_EQ(no_dropout.attention_quadratic, 2 * as2b);
}

TEST(TransformerBaselinesTest, PaddingFreeClosedFormsOnAnExplicitList) {
  const std::vector<int64_t> lengths = {100, 37, 512, 3, 512, 64};
  const double h = 256, a = 8, b = 6, k = 512;
  double sum = 0;
  for (int64_t s : lengths) sum += s;
  const TransformerShape shape = Shape(256, 8, 1024);
  const BatchSpec batch = BatchSpec::Explicit(lengths);
  const double naive = Layer(shape, batch, AttentionLayout::kNaive).total();
  const double flash = Layer(shape, batch, AttentionLayout::kFlash).total();
  const double padding_free = Layer(shape, batch, AttentionLayout::kPaddingFree).total();
  // M_naive = K·b·h·(34 + 5aK/h)
  EXPECT_DOUBLE_EQ(naive, k * b * h * (34 + 5 * a * k / h));
  // M_flash = K·b·h·(34 + Σs/(K·b)·(1 + 2a/h))
  EXPECT_DOUBLE_EQ(flash, k * b * h * (34 + sum / (k * b) * (1 + 2 * a / h)));
  // M_padding_free = Σs·h·(35 + 2a/h)
  EXPECT_DOUBLE_EQ(padding_free, sum * h * (35 + 2 * a / h));
  // Padding costs the padded layouts 34 bytes per hidden unit and pad token.
  EXPECT_EQ(flash - padding_free, 34 * h * (b * k - sum));
  EXPECT_LT(padding_free, flash);
  EXPECT_LT(flash, naive);
}

TEST(TransformerBaselinesTest, FlashEqualsPaddingFreeWithoutPadding) {
  const TransformerShape shape = Shape(512, 8);
  const BatchSpec batch = Equal(4, 700);
  const LayerActivationBytes flash = Layer(shape, batch, AttentionLayout::kFlash);
  const LayerActivationBytes padding_free = Layer(shape, batch, AttentionLayout::kPaddingFree);
  EXPECT_EQ(flash.attention, padding_free.attention);
  EXPECT_EQ(flash.feed_forward, padding_free.feed_forward);
  EXPECT_EQ(flash.layer_norm, padding_free.layer_norm);
  EXPECT_EQ(flash.layer_input, padding_free.layer_input);
  EXPECT_EQ(flash.attention_quadratic, 0);
  EXPECT_GT(Layer(shape, batch, AttentionLayout::kNaive).total(), flash.total());
}

TEST(TransformerBaselinesTest, PaddedLayoutsFollowTheLongestSequence) {
  const TransformerShape shape = Shape(128, 4);
  // One long sequence among short ones: padded layouts pay for 4 × 1000 tokens.
  const BatchSpec mixed = BatchSpec::Explicit({1000, 10, 20, 30});
  const BatchSpec padded = Equal(4, 1000);
  const BatchSpec packed = BatchSpec::Explicit({1060});
  EXPECT_EQ(Layer(shape, mixed, AttentionLayout::kNaive).total(),
            Layer(shape, padded, AttentionLayout::kNaive).total());
  EXPECT_EQ(Layer(shape, mixed, AttentionLayout::kNaive).feed_forward,
            Layer(shape, padded, AttentionLayout::kFlash).feed_forward);
  // Padding-free memory depends only on the token count, not on how it is split.
  EXPECT_EQ(Layer(shape, mixed, AttentionLayout::kPaddingFree).total(),
            Layer(shape, packed, AttentionLayout::kPaddingFree).total());
  EXPECT_EQ(Layer(shape, mixed, AttentionLayout::kPaddingFree).total(),
            Layer(shape, BatchSpec::Explicit({1060}), AttentionLayout::kFlash).total());
}

// The padding-free article's table: per-layer memory of a 20B model (h 6144, a 48, f 24576), lengths uniform
// in 1..N, in GiB ("GB" in the article) to 3 decimals. The batch size is not printed; b = 8 reproduces every
// entry. Two entries (flash at 8192, padding-free at 4096) sit 0.56 and 0.52 thousandths from our value, so
// the tolerance is one unit of the last printed digit.
TEST(TransformerBaselinesTest, PaddingFreeArticlesTwentyBillionModelTable) {
  struct Row {
    int64_t n;
    double naive, flash, padding_free;
  };
  const Row table[] = {
      {512, 1.085, 0.721, 0.411},        {1024, 2.919, 1.441, 0.821},    {2048, 8.837, 2.882, 1.642},
      {4096, 29.674, 5.763, 3.283},      {8192, 107.347, 11.524, 6.566}, {16384, 406.693, 23.048, 13.132},
      {32768, 1581.386, 46.096, 26.263},
  };
  const TransformerShape shape = Shape(6144, 48, 24576);
  for (const Row& row : table) {
    SCOPED_TRACE(testing::Message() << "N=" << row.n);
    const BatchSpec batch = BatchSpec::Uniform(row.n, 8);
    EXPECT_NEAR(Layer(shape, batch, AttentionLayout::kNaive).total() / kGiB, row.naive, 1e-3);
    EXPECT_NEAR(Layer(shape, batch, AttentionLayout::kFlash).total() / kGiB, row.flash, 1e-3);
    EXPECT_NEAR(Layer(shape, batch, AttentionLayout::kPaddingFree).total() / kGiB, row.padding_free, 1e-3);
  }
  // The headline "~43% saved" (padding-free against FlashAttention at N = 8192).
  const BatchSpec batch = BatchSpec::Uniform(8192, 8);
  const double saved = 1 - Layer(shape, batch, AttentionLayout::kPaddingFree).total() /
                               Layer(shape, batch, AttentionLayout::kFlash).total();
  EXPECT_NEAR(saved, 0.43, 0.01);
}

// ---- Uniform expectations -----------------------------------------------------------------------

// Every tuple of b lengths in 1..L, each with probability L^-b.
template <typename Visit>
void ForEachTuple(int64_t max_length, int64_t batch_size, Visit visit) {
  std::vector<int64_t> tuple(batch_size, 1);
  while (true) {
    visit(tuple);
    int64_t i = 0;
    while (i < batch_size && tuple[i] == max_length) tuple[i++] = 1;
    if (i == batch_size) return;
    ++tuple[i];
  }
}

TEST(TransformerBaselinesTest, UniformMomentsMatchBruteForceEnumeration) {
  for (int64_t l = 1; l <= 6; ++l) {
    for (int64_t b = 1; b <= 4; ++b) {
      SCOPED_TRACE(testing::Message() << "L=" << l << " b=" << b);
      double count = 0, max = 0, max2 = 0, tokens = 0, squares = 0;
      ForEachTuple(l, b, [&](const std::vector<int64_t>& tuple) {
        int64_t k = 0;
        for (int64_t s : tuple) {
          k = std::max(k, s);
          tokens += s;
          squares += s * s;
        }
        max += k;
        max2 += k * k;
        count += 1;
      });
      const BatchMoments moments = Moments(BatchSpec::Uniform(l, b));
      EXPECT_EQ(moments.sequences, b);
      EXPECT_NEAR(moments.max_length, max / count, 1e-12 * l);
      EXPECT_NEAR(moments.max_length_squared, max2 / count, 1e-12 * l * l);
      EXPECT_NEAR(moments.tokens, tokens / count, 1e-12 * l * b);
      EXPECT_NEAR(moments.sum_squared_lengths, squares / count, 1e-12 * l * l * b);
    }
  }
}

TEST(TransformerBaselinesTest, UniformBaselinesAreTheAverageOverAllBatches) {
  // Every byte count is linear in the moments, so the uniform rows equal the mean of the rows
  // of every equally likely explicit batch.
  BaselineWorkload workload;
  workload.shape = Shape(64, 4, 0, 2, true, /*layers=*/3);
  workload.batch = BatchSpec::Uniform(7, 3);
  absl::StatusOr<std::vector<BaselineRow>> expected = ComputeBaselines(workload);
  ASSERT_TRUE(expected.ok()) << expected.status();
  std::vector<double> sums(expected->size(), 0.0);
  double count = 0;
  ForEachTuple(7, 3, [&](const std::vector<int64_t>& tuple) {
    workload.batch = BatchSpec::Explicit(tuple);
    absl::StatusOr<std::vector<BaselineRow>> rows = ComputeBaselines(workload);
    ASSERT_TRUE(rows.ok()) << rows.status();
    for (size_t i = 0; i < rows->size(); ++i) sums[i] += (*rows)[i].activation_bytes;
    count += 1;
  });
  for (size_t i = 0; i < sums.size(); ++i) {
    EXPECT_NEAR((*expected)[i].activation_bytes, sums[i] / count, 1e-12 * (*expected)[i].activation_bytes)
        << AttentionLayoutName((*expected)[i].layout) << " " << RecomputeName((*expected)[i].recompute);
  }
}

TEST(TransformerBaselinesTest, UniformSingleSequenceHasClosedForm) {
  for (int64_t l : {1, 2, 1000, 1 << 20}) {
    const BatchMoments moments = Moments(BatchSpec::Uniform(l, 1));
    const double length = static_cast<double>(l);
    EXPECT_NEAR(moments.max_length, (length + 1) / 2, 1e-9 * length);
    EXPECT_NEAR(moments.max_length_squared, (length + 1) * (2 * length + 1) / 6, 1e-9 * length * length);
    EXPECT_DOUBLE_EQ(moments.max_length, moments.tokens);
  }
  // The longest accepted distribution is accepted; a large batch pushes E[K] toward L.
  const BatchMoments longest = Moments(BatchSpec::Uniform(kMaxBaselineSequenceLength, 64));
  EXPECT_GT(longest.max_length, 0.98 * kMaxBaselineSequenceLength);
  EXPECT_LT(longest.max_length, kMaxBaselineSequenceLength);
}

// ---- Recomputation ------------------------------------------------------------------------------

TEST(TransformerBaselinesTest, AttentionRecomputeRemovesExactlyTheAttentionBlock) {
  const int64_t s = 1024, b = 2, h = 512, a = 8;
  const double sbh = static_cast<double>(s) * b * h;
  const double as2b = static_cast<double>(a) * s * s * b;
  const TransformerShape shape = Shape(h, a);
  const BatchSpec batch = Equal(b, s);
  const RecomputeCost none = Cost(shape, batch, AttentionLayout::kNaive, Recompute::kNone);
  const RecomputeCost attention = Cost(shape, batch, AttentionLayout::kNaive, Recompute::kAttention);
  // The checkpointing article: both the 11·SBH and the 5·aS²B terms go; one SBH checkpoint
  // (2 bytes) is added.
  EXPECT_EQ(none.kept_bytes_per_layer - attention.kept_bytes_per_layer, 11 * sbh + 5 * as2b - 2 * sbh);
  EXPECT_EQ(attention.kept_bytes_per_layer, (19 + 4 + 2) * sbh);
  // What is kept no longer depends on the attention layout: the S² term is gone entirely.
  for (AttentionLayout layout : {AttentionLayout::kFlash, AttentionLayout::kPaddingFree}) {
    EXPECT_EQ(Cost(shape, batch, layout, Recompute::kAttention).kept_bytes_per_layer,
              attention.kept_bytes_per_layer);
  }
  // ... and it is linear in S.
  EXPECT_EQ(Cost(shape, Equal(b, 2 * s), AttentionLayout::kNaive, Recompute::kAttention).kept_bytes_per_layer,
            2 * attention.kept_bytes_per_layer);
  // Feed-forward recompute keeps the S² term: 19·SBH go, the checkpoint comes.
  const RecomputeCost feed_forward = Cost(shape, batch, AttentionLayout::kNaive, Recompute::kFeedForward);
  EXPECT_EQ(feed_forward.kept_bytes_per_layer, (11 + 4 + 2) * sbh + 5 * as2b);
  EXPECT_EQ(none.kept_bytes_per_layer - feed_forward.kept_bytes_per_layer, 19 * sbh - 2 * sbh);
  // Full recompute keeps the layer input only.
  EXPECT_EQ(Cost(shape, batch, AttentionLayout::kNaive, Recompute::kFull).kept_bytes_per_layer, 2 * sbh);
}

TEST(TransformerBaselinesTest, RecomputeOrderings) {
  const std::vector<BatchSpec> batches = {Equal(1, 128), Equal(8, 4096), BatchSpec::Explicit({5, 900, 33}),
                                          BatchSpec::Uniform(2048, 4)};
  for (const BatchSpec& batch : batches) {
    for (AttentionLayout layout : kAllLayouts) {
      SCOPED_TRACE(AttentionLayoutName(layout));
      const TransformerShape shape = Shape(1024, 16, 0, 2, true, /*layers=*/24);
      const RecomputeCost none = Cost(shape, batch, layout, Recompute::kNone);
      const RecomputeCost attention = Cost(shape, batch, layout, Recompute::kAttention);
      const RecomputeCost feed_forward = Cost(shape, batch, layout, Recompute::kFeedForward);
      const RecomputeCost full = Cost(shape, batch, layout, Recompute::kFull);
      EXPECT_LT(full.kept_bytes_per_layer, attention.kept_bytes_per_layer);
      EXPECT_LT(full.kept_bytes_per_layer, feed_forward.kept_bytes_per_layer);
      EXPECT_LT(attention.kept_bytes_per_layer, none.kept_bytes_per_layer);
      EXPECT_LT(feed_forward.kept_bytes_per_layer, none.kept_bytes_per_layer);
      EXPECT_LT(full.activation_bytes, attention.activation_bytes);
      EXPECT_LT(attention.activation_bytes, none.activation_bytes);
      EXPECT_LT(feed_forward.activation_bytes, none.activation_bytes);
      EXPECT_EQ(none.compute_overhead_fraction, 0);
      EXPECT_GT(attention.compute_overhead_fraction, 0);
      EXPECT_DOUBLE_EQ(full.compute_overhead_fraction, 1.0 / 3);
      EXPECT_DOUBLE_EQ(attention.compute_overhead_fraction + feed_forward.compute_overhead_fraction, 1.0 / 3);
    }
  }
  // Short sequences (S < 2h): attention is the cheaper recompute; with naive attention at long
  // sequences it also frees more memory than recomputing the feed-forward block.
  const TransformerShape shape = Shape(1024, 16, 0, 2, true, 24);
  EXPECT_LT(
      Cost(shape, Equal(8, 1024), AttentionLayout::kNaive, Recompute::kAttention).compute_overhead_fraction,
      Cost(shape, Equal(8, 1024), AttentionLayout::kNaive, Recompute::kFeedForward)
          .compute_overhead_fraction);
  EXPECT_LT(
      Cost(shape, Equal(8, 4096), AttentionLayout::kNaive, Recompute::kAttention).kept_bytes_per_layer,
      Cost(shape, Equal(8, 4096), AttentionLayout::kNaive, Recompute::kFeedForward).kept_bytes_per_layer);
}

TEST(TransformerBaselinesTest, CheckpointingArticlesOverheadNumbers) {
  // S = H: F_attn = 12·SH², F_ffn = 16·SH²: 12/84 = 1/7 (14.3%) and 16/84 = 4/21 (19.0%).
  const TransformerShape square = Shape(4096, 32);
  const BatchSpec s_equals_h = Equal(1, 4096);
  EXPECT_DOUBLE_EQ(
      Cost(square, s_equals_h, AttentionLayout::kNaive, Recompute::kAttention).compute_overhead_fraction,
      1.0 / 7);
  EXPECT_DOUBLE_EQ(
      Cost(square, s_equals_h, AttentionLayout::kNaive, Recompute::kFeedForward).compute_overhead_fraction,
      4.0 / 21);
  // S ≪ H: 8/72 = 1/9 (11.1%) and 16/72 = 2/9 (22.2%).
  const BatchSpec short_sequence = Equal(4, 1);
  EXPECT_NEAR(
      Cost(square, short_sequence, AttentionLayout::kFlash, Recompute::kAttention).compute_overhead_fraction,
      1.0 / 9, 1e-4);
  EXPECT_NEAR(Cost(square, short_sequence, AttentionLayout::kFlash, Recompute::kFeedForward)
                  .compute_overhead_fraction,
              2.0 / 9, 1e-4);
  // The article's worked example, attention 100 and FFN 300 FLOPs: +8.3%, +25%, +33.3%. With
  // h = S = 64 and f = 576: F_attn = 12·64³, F_ffn = 4·64·576·64 = 36·64³.
  const TransformerShape example = Shape(64, 4, 576);
  const BatchSpec batch = Equal(1, 64);
  const LayerForwardFlops flops = Flops(example, batch, AttentionLayout::kNaive);
  EXPECT_EQ(3 * flops.attention(), flops.feed_forward);
  EXPECT_DOUBLE_EQ(
      Cost(example, batch, AttentionLayout::kNaive, Recompute::kAttention).compute_overhead_fraction,
      100.0 / 1200);
  EXPECT_DOUBLE_EQ(
      Cost(example, batch, AttentionLayout::kNaive, Recompute::kFeedForward).compute_overhead_fraction,
      300.0 / 1200);
  EXPECT_DOUBLE_EQ(Cost(example, batch, AttentionLayout::kNaive, Recompute::kFull).compute_overhead_fraction,
                   400.0 / 1200);
}

TEST(TransformerBaselinesTest, FlopsFollowTheLayout) {
  const std::vector<int64_t> lengths = {10, 200, 30};
  const double h = 128, f = 512, b = 3, k = 200, sum = 240, squares = 100 + 40000 + 900;
  const TransformerShape shape = Shape(128, 4);
  const BatchSpec batch = BatchSpec::Explicit(lengths);
  const LayerForwardFlops naive = Flops(shape, batch, AttentionLayout::kNaive);
  EXPECT_EQ(naive.projections, 8 * h * h * b * k);
  EXPECT_EQ(naive.scores, 4 * h * b * k * k);
  EXPECT_EQ(naive.feed_forward, 4 * h * f * b * k);
  const LayerForwardFlops flash = Flops(shape, batch, AttentionLayout::kFlash);
  EXPECT_EQ(flash.projections, naive.projections);
  EXPECT_EQ(flash.scores, 4 * h * squares);  // the kernel skips pad tokens
  const LayerForwardFlops padding_free = Flops(shape, batch, AttentionLayout::kPaddingFree);
  EXPECT_EQ(padding_free.projections, 8 * h * h * sum);
  EXPECT_EQ(padding_free.scores, 4 * h * squares);
  EXPECT_EQ(padding_free.feed_forward, 4 * h * f * sum);
}

TEST(TransformerBaselinesTest, PeakIsKeptTimesLayersPlusOneRecomputedLayer) {
  BaselineWorkload workload;
  workload.shape = Shape(256, 8, 0, 2, true, /*layers=*/12);
  workload.shape.vocab_size = 1000;
  workload.batch = BatchSpec::Explicit({128, 512, 77});
  absl::StatusOr<std::vector<BaselineRow>> rows = ComputeBaselines(workload);
  ASSERT_TRUE(rows.ok()) << rows.status();
  absl::StatusOr<ModelStateBytes> state = ComputeModelState(workload.shape, workload.state);
  ASSERT_TRUE(state.ok()) << state.status();
  for (const BaselineRow& row : *rows) {
    SCOPED_TRACE(testing::Message() << AttentionLayoutName(row.layout) << " "
                                    << RecomputeName(row.recompute));
    const LayerActivationBytes layer = Layer(workload.shape, workload.batch, row.layout);
    EXPECT_EQ(row.activation_bytes, 12 * row.kept_bytes_per_layer + row.recomputed_bytes_per_layer);
    EXPECT_EQ(row.model_state_bytes, state->total());
    EXPECT_EQ(row.total_bytes, row.activation_bytes + state->total());
    EXPECT_EQ(row.kept_bytes_per_layer + row.recomputed_bytes_per_layer,
              layer.total() + (row.recompute == Recompute::kNone ? 0 : layer.layer_input));
    if (row.recompute == Recompute::kNone) {
      EXPECT_EQ(row.activation_bytes, 12 * layer.total());
      EXPECT_EQ(row.recomputed_bytes_per_layer, 0);
    }
    if (row.recompute == Recompute::kFull) {
      EXPECT_EQ(row.kept_bytes_per_layer, layer.layer_input);
      EXPECT_EQ(row.recomputed_bytes_per_layer, layer.total());
    }
  }
}

// ---- Model state and rows -----------------------------------------------------------------------

TEST(TransformerBaselinesTest, ModelStateCountsParametersGradientsAndAdam) {
  // h = 4, f = 16, 2 layers, vocab 10. Per layer: 4h² + 4h = 80, 2hf + f + h = 148, 4h = 16
  // (244); plus 10·4 embedding and 2·4 final norm: 2·244 + 40 + 8 = 536.
  TransformerShape shape = Shape(4, 2, 16, 2, true, /*layers=*/2);
  shape.vocab_size = 10;
  absl::StatusOr<ModelStateBytes> state = ComputeModelState(shape, ModelStateOptions{});
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->parameters, 536);
  EXPECT_EQ(state->parameter_bytes, 4 * 536);
  EXPECT_EQ(state->gradient_bytes, 4 * 536);
  EXPECT_EQ(state->optimizer_bytes, 8 * 536);
  EXPECT_EQ(state->total(), 16 * 536);  // the checkpointing article: 4N + 4N + 8N

  ModelStateOptions bf16_sgd;
  bf16_sgd.parameter_bytes_per_element = 2;
  bf16_sgd.adam = false;
  state = ComputeModelState(shape, bf16_sgd);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->total(), 4 * 536);
  EXPECT_EQ(state->optimizer_bytes, 0);

  shape.vocab_size = 0;
  state = ComputeModelState(shape, ModelStateOptions{});
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->parameters, 536 - 40);
}

TEST(TransformerBaselinesTest, RowsComeInLayoutThenRecomputeOrder) {
  BaselineWorkload workload;
  workload.shape = Shape(512, 8, 0, 2, true, 6);
  workload.batch = BatchSpec::Uniform(1024, 4);
  absl::StatusOr<std::vector<BaselineRow>> rows = ComputeBaselines(workload);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 12u);
  size_t i = 0;
  for (AttentionLayout layout : kAllLayouts) {
    for (Recompute recompute : kAllRecomputes) {
      EXPECT_EQ((*rows)[i].layout, layout);
      EXPECT_EQ((*rows)[i].recompute, recompute);
      ++i;
    }
  }
  // Within each strategy the layouts keep their memory order.
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_GT((*rows)[r].activation_bytes, (*rows)[4 + r].activation_bytes);
    EXPECT_GT((*rows)[4 + r].activation_bytes, (*rows)[8 + r].activation_bytes);
  }
}

TEST(TransformerBaselinesTest, Names) {
  EXPECT_EQ(AttentionLayoutName(AttentionLayout::kNaive), "naive");
  EXPECT_EQ(AttentionLayoutName(AttentionLayout::kFlash), "flash");
  EXPECT_EQ(AttentionLayoutName(AttentionLayout::kPaddingFree), "padding-free");
  EXPECT_EQ(RecomputeName(Recompute::kNone), "none");
  EXPECT_EQ(RecomputeName(Recompute::kAttention), "attention");
  EXPECT_EQ(RecomputeName(Recompute::kFeedForward), "feed-forward");
  EXPECT_EQ(RecomputeName(Recompute::kFull), "full");
}

}  // namespace
}  // namespace slimfit::planner
