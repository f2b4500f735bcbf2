#include "server/gradient_aggregator.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;

ShardResult Result(int64_t shard, int64_t tokens, double loss, float value) {
  ShardResult r;
  r.summary.set_round(3);
  r.summary.set_parameter_version(9);
  r.summary.set_shard_id(shard);
  r.summary.set_token_count(tokens);
  r.summary.set_loss_sum(loss);
  r.gradient = {at::full({2, 2}, value), at::full({3}, value)};
  return r;
}

TEST(GradientAggregatorTest, SumsEveryShardOnce) {
  GradientAggregator aggregator(3, 9, {10, 20}, {{2, 2}, {3}}, false, at::kFloat);
  ASSERT_TRUE(aggregator.Add(Result(0, 10, 5.0, 1.5f)).ok());
  EXPECT_FALSE(aggregator.complete());
  EXPECT_EQ(aggregator.Add(Result(0, 10, 5.0, 1.5f)).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(aggregator.Add(Result(1, 20, 7.0, 0.25f)).ok());
  ASSERT_TRUE(aggregator.complete());
  EXPECT_DOUBLE_EQ(aggregator.loss_sum(), 12.0);
  EXPECT_EQ(aggregator.token_count(), 30);
  std::vector<at::Tensor> sum = aggregator.gradient();
  EXPECT_EQ(sum[0].scalar_type(), at::kFloat);  // as asked
  EXPECT_DOUBLE_EQ(sum[1][2].item<double>(), 1.75);
}

TEST(GradientAggregatorTest, AddValidatedCountsAndSumsAsAddDoesWithoutCheckingValuesAgain) {
  GradientAggregator aggregator(3, 9, {10, 20}, {{2, 2}, {3}}, false, at::kFloat);
  const ShardResult first = Result(0, 10, 5.0, 1.5f);
  ASSERT_TRUE(aggregator.Validate(first).ok());
  ASSERT_TRUE(aggregator.AddValidated(first).ok());
  EXPECT_EQ(aggregator.AddValidated(first).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(aggregator.Add(first).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(aggregator.Add(Result(1, 20, 7.0, 0.25f)).ok());
  ASSERT_TRUE(aggregator.complete());
  EXPECT_DOUBLE_EQ(aggregator.loss_sum(), 12.0);
  EXPECT_DOUBLE_EQ(aggregator.gradient()[0][1][1].item<double>(), 1.75);
}

TEST(GradientAggregatorTest, AStepBoundarysCountAndADroppedShardComplete) {
  GradientAggregator aggregator(3, 9, {10, 20}, {{2, 2}, {3}}, false, at::kFloat);
  aggregator.AllowTokenCounts(1, {6, 13, 20});  // shard 1's three inner steps
  EXPECT_EQ(aggregator.Add(Result(0, 6, 5.0, 1.0f)).code(),
            absl::StatusCode::kInvalidArgument);  // not shard 0's
  absl::Status odd = aggregator.Add(Result(1, 7, 5.0, 1.0f));
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(odd.message(), HasSubstr("7 predicted tokens, expected 20 or a step boundary's"));
  ASSERT_TRUE(aggregator.Add(Result(1, 13, 5.0, 1.0f)).ok());  // two of its three steps
  EXPECT_FALSE(aggregator.complete());
  ASSERT_TRUE(aggregator.Drop(0).ok());
  EXPECT_TRUE(aggregator.complete());
  EXPECT_EQ(aggregator.token_count(), 13);
  EXPECT_EQ(aggregator.Add(Result(0, 10, 5.0, 1.0f)).code(),
            absl::StatusCode::kDeadlineExceeded);                               // too late
  EXPECT_EQ(aggregator.Drop(1).code(), absl::StatusCode::kFailedPrecondition);  // it counted
}

TEST(GradientAggregatorTest, ALastRoundsSumIsZeroedAndReusedWhenItMatches) {
  std::vector<at::Tensor> last = {at::full({2, 2}, 7.0), at::full({3}, -3.0)};
  const void* storage = last[0].data_ptr();
  GradientAggregator aggregator(3, 9, {10}, {{2, 2}, {3}}, false, at::kFloat, last);
  ASSERT_TRUE(aggregator.Add(Result(0, 10, 5.0, 1.5f)).ok());
  std::vector<at::Tensor> sum = aggregator.gradient();
  EXPECT_EQ(sum[0].data_ptr(), storage);               // the same memory
  EXPECT_DOUBLE_EQ(sum[0][1][1].item<double>(), 1.5);  // zeroed first
  EXPECT_DOUBLE_EQ(sum[1][0].item<double>(), 1.5);
  // Shapes that do not match are not reused.
  GradientAggregator other(3, 9, {10}, {{2, 2}, {4}}, false, at::kFloat, {at::zeros({2, 2}), at::zeros({3})});
  EXPECT_EQ(other.Add(Result(0, 10, 5.0, 1.5f)).code(),
            absl::StatusCode::kInvalidArgument);  // a {3} gradient
  // Nor is a sum of another dtype.
  std::vector<at::Tensor> wide = {at::full({2, 2}, 7.0, at::kDouble), at::full({3}, -3.0, at::kDouble)};
  GradientAggregator narrow(3, 9, {10}, {{2, 2}, {3}}, false, at::kFloat, wide);
  ASSERT_TRUE(narrow.Add(Result(0, 10, 5.0, 1.5f)).ok());
  EXPECT_EQ(narrow.gradient()[0].scalar_type(), at::kFloat);
  EXPECT_NE(narrow.gradient()[0].data_ptr(), wide[0].data_ptr());
}

TEST(GradientAggregatorTest, RejectsResultsThatDoNotBelong) {
  GradientAggregator aggregator(3, 9, {10, 20}, {{2, 2}, {3}}, false, at::kFloat);
  ShardResult stale = Result(0, 10, 1, 1);
  stale.summary.set_parameter_version(8);
  EXPECT_THAT(aggregator.Add(stale).message(), HasSubstr("version 8"));
  EXPECT_THAT(aggregator.Add(Result(2, 10, 1, 1)).message(), HasSubstr("no such shard"));
  EXPECT_THAT(aggregator.Add(Result(0, 11, 1, 1)).message(), HasSubstr("11 predicted tokens, expected 10"));
  EXPECT_THAT(aggregator.Add(Result(0, 10, 1, std::numeric_limits<float>::quiet_NaN())).message(),
              HasSubstr("not finite"));
  ShardResult shape = Result(0, 10, 1, 1);
  shape.gradient[1] = at::zeros({4});
  EXPECT_THAT(aggregator.Add(shape).message(), HasSubstr("wrong shape"));
  EXPECT_EQ(aggregator.shards_counted(), 0);
}

TEST(GradientAggregatorTest, OneNonFiniteElementAnywhereIsRefused) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    GradientAggregator aggregator(3, 9, {10}, {{2, 2}, {3}}, false, at::kFloat);
    ShardResult r = Result(0, 10, 1, 2.0f);
    r.gradient[1][1] = bad;
    EXPECT_THAT(aggregator.Add(r).message(), HasSubstr("gradient tensor 1 is not finite")) << bad;
  }
  // One shard may hold anything finite: the sum of one cannot overflow.
  GradientAggregator large(3, 9, {10}, {{2, 2}, {3}}, false, at::kFloat);
  EXPECT_TRUE(large.Add(Result(0, 10, 1, std::numeric_limits<float>::max())).ok());
}

// Finite shards whose float32 sum could overflow are refused: each element of each of n shards
// must be within max / n.
TEST(GradientAggregatorTest, ValuesTheSumCouldNotHoldAreRefused) {
  const float max = std::numeric_limits<float>::max();
  GradientAggregator aggregator(3, 9, {10, 10}, {{2, 2}, {3}}, false, at::kFloat);
  ShardResult huge = Result(0, 10, 1, 1.0f);
  huge.gradient[0][1][0] = 0.75f * max;  // two of these would be infinite
  const absl::Status refused = aggregator.Add(huge);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("gradient tensor 0 holds a value of magnitude 2.55"));
  EXPECT_THAT(refused.message(), HasSubstr("more than a sum of 2 shards in float32 can hold"));
  ASSERT_TRUE(aggregator.Add(Result(0, 10, 1, 0.5f * max)).ok());
  ASSERT_TRUE(aggregator.Add(Result(1, 10, 1, -0.5f * max)).ok());
  EXPECT_TRUE(std::isfinite(aggregator.gradient()[0].abs().max().item<double>()));
  // A float64 sum holds any float32 shards.
  GradientAggregator wide(3, 9, {10, 10}, {{2, 2}, {3}}, false, at::kDouble);
  EXPECT_TRUE(wide.Add(Result(0, 10, 1, max)).ok());
  EXPECT_TRUE(wide.Add(Result(1, 10, 1, max)).ok());
}

// The float32 → float64 accumulation (a loop of its own for contiguous float32 tensors, several
// threads for large ones) gives exactly what converting and adding with LibTorch gives, for
// contiguous, strided and float64 shard gradients.
TEST(GradientAggregatorTest, AccumulatesExactlyAsFloat64Addition) {
  const int64_t n = 300001;  // several parallel blocks and a ragged end
  at::manual_seed(5);
  const at::Tensor a = at::randn({n}) * 1e3;
  const at::Tensor b = at::randn({n}) * 1e-3;
  const at::Tensor c = at::randn({2 * n}).slice(0, 0, 2 * n, 2);  // strided
  const at::Tensor d = at::randn({n}, at::kDouble);
  GradientAggregator aggregator(1, 1, {1, 1, 1, 1}, {{n}}, false, at::kDouble);
  auto shard = [](int64_t id, const at::Tensor& g) {
    ShardResult r;
    r.summary.set_round(1);
    r.summary.set_parameter_version(1);
    r.summary.set_shard_id(id);
    r.summary.set_token_count(1);
    r.gradient = {g};
    return r;
  };
  ASSERT_TRUE(aggregator.Add(shard(0, a)).ok());
  ASSERT_TRUE(aggregator.Add(shard(1, b)).ok());
  ASSERT_TRUE(aggregator.Add(shard(2, c)).ok());
  ASSERT_TRUE(aggregator.Add(shard(3, d)).ok());
  at::Tensor want = at::zeros({n}, at::kDouble);
  for (const at::Tensor& g : {a, b, c, d}) want.add_(g.to(at::kDouble));
  EXPECT_TRUE(at::equal(aggregator.gradient()[0], want));
}

// A float32 sum (the coordinator's for float32 jobs) of contiguous and strided float32 shards is
// exactly LibTorch's float32 addition in the same order.
TEST(GradientAggregatorTest, AccumulatesInFloat32ExactlyAsFloat32Addition) {
  const int64_t n = 300001;
  at::manual_seed(6);
  const at::Tensor a = at::randn({n}) * 1e3;
  const at::Tensor b = at::randn({n}) * 1e-3;
  const at::Tensor c = at::randn({2 * n}).slice(0, 0, 2 * n, 2);  // strided
  GradientAggregator aggregator(1, 1, {1, 1, 1}, {{n}}, false, at::kFloat);
  int64_t id = 0;
  for (const at::Tensor& g : {a, b, c}) {
    ShardResult r;
    r.summary.set_round(1);
    r.summary.set_parameter_version(1);
    r.summary.set_shard_id(id++);
    r.summary.set_token_count(1);
    r.gradient = {g};
    ASSERT_TRUE(aggregator.Add(std::move(r)).ok());
  }
  at::Tensor want = at::zeros({n});
  for (const at::Tensor& g : {a, b, c}) want.add_(g);
  ASSERT_EQ(aggregator.gradient()[0].scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(aggregator.gradient()[0], want));
  // And it is float32 rounding, not float64's: the float64 sum differs.
  EXPECT_FALSE(at::equal(aggregator.gradient()[0].to(at::kDouble),
                         a.to(at::kDouble) + b.to(at::kDouble) + c.to(at::kDouble)));
}

// Adds `result`'s gradient to `aggregator` in pieces of up to `piece` elements, as a stream does.
absl::Status AddInPieces(GradientAggregator& aggregator, const ShardResult& result, int64_t piece) {
  for (size_t i = 0; i < result.gradient.size(); ++i) {
    const at::Tensor flat = result.gradient[i].reshape({-1});
    for (int64_t first = 0; first < flat.numel(); first += piece) {
      const at::Tensor values = flat.narrow(0, first, std::min(piece, flat.numel() - first)).contiguous();
      if (absl::Status s = aggregator.AddValues(result.summary.shard_id(), i, first, values); !s.ok())
        return s;
    }
  }
  return aggregator.CountStreamed(result.summary);
}

ShardResult RandomResult(int64_t shard, int64_t tokens) {
  ShardResult r = Result(shard, tokens, 1.0 + static_cast<double>(shard), 0.0f);
  r.gradient = {at::randn({2, 2}), at::randn({3})};
  return r;
}

TEST(GradientAggregatorTest, ShardsSummedAsTheyStreamInEqualShardsSummedWhole) {
  at::manual_seed(5);
  const std::vector<ShardResult> shards = {RandomResult(0, 10), RandomResult(1, 20), RandomResult(2, 30)};
  GradientAggregator whole(3, 9, {10, 20, 30}, {{2, 2}, {3}}, false, at::kFloat);
  GradientAggregator streamed(3, 9, {10, 20, 30}, {{2, 2}, {3}}, false, at::kFloat);
  for (const ShardResult& shard : shards) {
    ASSERT_TRUE(whole.Add(shard).ok());
    ASSERT_TRUE(AddInPieces(streamed, shard, 3).ok());  // pieces that straddle rows
  }
  ASSERT_TRUE(streamed.complete());
  EXPECT_EQ(streamed.token_count(), 60);
  EXPECT_DOUBLE_EQ(streamed.loss_sum(), whole.loss_sum());
  for (size_t i = 0; i < 2; ++i)
    EXPECT_TRUE(at::equal(streamed.gradient()[i], whole.gradient()[i]));  // bit for bit
  EXPECT_TRUE(streamed.taint().empty());
}

TEST(GradientAggregatorTest, StreamedValuesAreCheckedBeforeTheyAreSummed) {
  GradientAggregator aggregator(3, 9, {10, 20}, {{2, 2}, {3}}, false, at::kFloat);
  const at::Tensor nan = at::tensor({1.0f, std::numeric_limits<float>::quiet_NaN()});
  absl::Status not_finite = aggregator.AddValues(0, 1, 0, nan);
  EXPECT_EQ(not_finite.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_finite.message(), HasSubstr("gradient tensor 1 is not finite"));
  const at::Tensor huge = at::tensor({std::numeric_limits<float>::max()});
  EXPECT_THAT(aggregator.AddValues(0, 0, 0, huge).message(), HasSubstr("more than a sum of 2 shards"));
  EXPECT_THAT(aggregator.AddValues(0, 1, 2, at::ones({2})).message(), HasSubstr("outside its 3 elements"));
  EXPECT_THAT(aggregator.AddValues(0, 2, 0, at::ones({1})).message(), HasSubstr("no gradient tensor 2"));
  EXPECT_THAT(aggregator.AddValues(5, 0, 0, at::ones({1})).message(), HasSubstr("no such shard"));
  for (const at::Tensor& t : aggregator.gradient())
    EXPECT_EQ(t.abs().max().item<float>(), 0.0f);  // none summed

  ASSERT_TRUE(aggregator.AddValues(0, 1, 1, at::ones({2})).ok());
  ShardResult wrong = Result(0, 10, 5.0, 0.0f);
  wrong.summary.set_parameter_version(8);
  EXPECT_THAT(aggregator.CountStreamed(wrong.summary).message(), HasSubstr("expected round 3 version 9"));
  ASSERT_TRUE(aggregator.Drop(1).ok());
  EXPECT_EQ(aggregator.AddValues(1, 0, 0, at::ones({1})).code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(aggregator.CountStreamed(Result(0, 10, 5.0, 0.0f).summary).ok());
  EXPECT_EQ(aggregator.AddValues(0, 0, 0, at::ones({1})).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(aggregator.CountStreamed(Result(0, 10, 5.0, 0.0f).summary).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_DOUBLE_EQ(aggregator.gradient()[1][2].item<double>(), 1.0);
}

TEST(GradientAggregatorTest, ATaintKeepsItsFirstReason) {
  GradientAggregator aggregator(3, 9, {10}, {{2, 2}, {3}}, false, at::kFloat);
  EXPECT_TRUE(aggregator.taint().empty());
  aggregator.Taint("shard 0 broke");
  aggregator.Taint("shard 1 broke");
  EXPECT_EQ(aggregator.taint(), "shard 0 broke");
}

TEST(GradientAggregatorTest, EvaluationCountsLossOnly) {
  GradientAggregator aggregator(0, 1, {4}, {}, true, at::kFloat);
  ShardResult r;
  r.summary.set_round(0);
  r.summary.set_parameter_version(1);
  r.summary.set_token_count(4);
  r.summary.set_loss_sum(2.0);
  ASSERT_TRUE(aggregator.Add(r).ok());
  EXPECT_TRUE(aggregator.complete());
  EXPECT_TRUE(aggregator.gradient().empty());
}

}  // namespace
}  // namespace slimfit::server
