#include "server/spot_checks.h"

#include <ATen/ATen.h>

#include <cmath>

#include "gtest/gtest.h"

namespace slimfit::server {
namespace {

ShardResult Result(double scale, double loss = 10.0) {
  ShardResult result;
  result.summary.set_loss_sum(loss);
  result.summary.set_token_count(100);
  result.gradient = {at::arange(6, at::kFloat).reshape({2, 3}) * scale, at::ones({4}, at::kFloat) * scale};
  return result;
}

TEST(SpotChecksTest, TwoAgreeingAnswersAreAccepted) {
  SpotChecks checks(VerificationTolerance(performer::DType::kFloat32, /*bf16_products=*/false));
  checks.Expect(3);
  EXPECT_TRUE(checks.IsChecked(3));
  EXPECT_FALSE(checks.IsChecked(4));
  EXPECT_EQ(checks.Add(3, "w-a", Result(1.0)).kind, SpotChecks::Decision::Kind::kPending);
  EXPECT_EQ(checks.Add(3, "w-a", Result(5.0)).kind, SpotChecks::Decision::Kind::kPending);  // same worker
  SpotChecks::Decision decision = checks.Add(3, "w-b", Result(1.0 + 1e-6));
  EXPECT_EQ(decision.kind, SpotChecks::Decision::Kind::kAgreed);
  EXPECT_NEAR(decision.difference, 1e-6, 1e-7);
  EXPECT_EQ(decision.workers, (std::vector<std::string>{"w-a", "w-b"}));
}

// bfloat16 products: two honest results differ by their bfloat16 rounding (here 1%), which the
// job's tolerance accepts and float32's would not; a result 10% off still needs a tiebreak.
TEST(SpotChecksTest, Bf16JobsCompareToBf16Rounding) {
  EXPECT_EQ(VerificationTolerance(performer::DType::kFloat32, /*bf16_products=*/true), 3e-2);
  EXPECT_EQ(VerificationTolerance(performer::DType::kFloat32, /*bf16_products=*/false), 1e-4);
  SpotChecks checks(VerificationTolerance(performer::DType::kFloat32, /*bf16_products=*/true));
  checks.Expect(1);
  checks.Expect(2);
  checks.Add(1, "w-a", Result(1.0));
  EXPECT_EQ(checks.Add(1, "w-b", Result(1.01)).kind, SpotChecks::Decision::Kind::kAgreed);
  checks.Add(2, "w-a", Result(1.0));
  EXPECT_EQ(checks.Add(2, "w-b", Result(1.1)).kind, SpotChecks::Decision::Kind::kNeedsTiebreak);
}

TEST(SpotChecksTest, AThirdAnswerOutvotesTheLiar) {
  SpotChecks checks(1e-4);
  checks.Expect(0);
  checks.Add(0, "w-liar", Result(1000.0));
  EXPECT_EQ(checks.Add(0, "w-a", Result(1.0)).kind, SpotChecks::Decision::Kind::kNeedsTiebreak);
  SpotChecks::Decision decision = checks.Add(0, "w-b", Result(1.0));
  ASSERT_EQ(decision.kind, SpotChecks::Decision::Kind::kResolved);
  EXPECT_EQ(decision.odd, "w-liar");
  EXPECT_TRUE(at::equal(decision.accepted.gradient[0], Result(1.0).gradient[0]));
}

TEST(SpotChecksTest, ALossThatDiffersIsADisagreementAndThreeDifferentAnswersAreUnresolvable) {
  SpotChecks checks(1e-4);
  checks.Expect(1);
  checks.Add(1, "w-a", Result(1.0, 10.0));
  EXPECT_EQ(checks.Add(1, "w-b", Result(1.0, 12.0)).kind, SpotChecks::Decision::Kind::kNeedsTiebreak);
  EXPECT_EQ(checks.Add(1, "w-c", Result(1.0, 14.0)).kind, SpotChecks::Decision::Kind::kUnresolvable);
}

TEST(SpotChecksTest, SelectionIsDeterministicAndCloseToTheFraction) {
  int checked = 0;
  for (int64_t shard = 0; shard < 20000; ++shard) {
    const bool a = IsSpotChecked(7, 3, shard, 0.05);
    EXPECT_EQ(a, IsSpotChecked(7, 3, shard, 0.05));
    checked += a ? 1 : 0;
  }
  EXPECT_NEAR(checked / 20000.0, 0.05, 0.01);
  EXPECT_FALSE(IsSpotChecked(7, 3, 1, 0.0));
  EXPECT_TRUE(IsSpotChecked(7, 3, 1, 1.0));
  EXPECT_NE(IsSpotChecked(1, 1, 1, 0.5) && IsSpotChecked(1, 1, 2, 0.5) && IsSpotChecked(1, 1, 3, 0.5) &&
                IsSpotChecked(1, 1, 4, 0.5) && IsSpotChecked(1, 1, 5, 0.5) && IsSpotChecked(1, 1, 6, 0.5),
            true);
}

TEST(SpotChecksTest, RelativeDifference) {
  EXPECT_EQ(RelativeGradientDifference(Result(1.0).gradient, Result(1.0).gradient), 0.0);
  EXPECT_NEAR(RelativeGradientDifference(Result(2.0).gradient, Result(1.0).gradient), 1.0, 1e-12);
  EXPECT_TRUE(std::isinf(RelativeGradientDifference({at::ones({2})}, {at::ones({3})})));
  EXPECT_TRUE(std::isinf(RelativeGradientDifference({at::ones({2})}, {at::zeros({2})})));
}

}  // namespace
}  // namespace slimfit::server
