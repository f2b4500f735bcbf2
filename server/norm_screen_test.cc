#include "server/norm_screen.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;

TEST(NormScreenTest, FlagsScaledAndZeroedGradientsOnceThereIsHistory) {
  NormScreen screen(30, 8, 4);
  EXPECT_TRUE(screen.Check(1e6).ok());  // no history yet: nothing to compare with
  for (double norm : {1.0, 1.3, 0.8, 1.1, 0.9}) {
    ASSERT_TRUE(screen.Check(norm).ok());
    screen.Accept(norm);
  }
  EXPECT_TRUE(screen.Check(2.5).ok());  // honest spread
  absl::Status scaled = screen.Check(1000.0);
  EXPECT_EQ(scaled.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(scaled.message()), HasSubstr("out of line"));
  EXPECT_FALSE(screen.Check(0.0).ok());
  EXPECT_FALSE(screen.Check(std::nan("")).ok());
}

TEST(NormScreenTest, ForgottenNormsLeaveTheHistoryAsBeforeThem) {
  NormScreen screen(/*factor=*/30, /*window=*/8, /*min_history=*/2);
  for (double norm : {1.0, 1.2, 0.9}) screen.Accept(norm);
  // A try of a round that is thrown away: its shards' norms, one of them equal to an older one.
  for (double norm : {40.0, 50.0, 1.2}) screen.Accept(norm);
  EXPECT_THAT(std::string(screen.Check(1e6).message()), HasSubstr("median 1.2 of the job's last 6 accepted"));
  screen.Forget({40.0, 50.0, 1.2, 7.0});  // 7 was never accepted: nothing to take back
  EXPECT_THAT(std::string(screen.Check(1e6).message()), HasSubstr("median 1 of the job's last 3 accepted"));
  EXPECT_FALSE(screen.Check(35.0).ok());  // with the forgotten norms the median was 1.2: 35 passed
  screen.Forget({1.2});
  screen.Forget({1.2});  // one occurrence each call: the second finds none
  EXPECT_THAT(std::string(screen.Check(1e6).message()), HasSubstr("median 1 of the job's last 2 accepted"));
}

TEST(NormScreenTest, PerTokenNormUndoesTheNormaliser) {
  // A shard of 50 tokens in a round of 200: its gradient is ∇(loss_sum / 200); per token it is
  // ‖g‖ · 200 / 50.
  const std::vector<at::Tensor> gradient = {at::full({3}, 1.0), at::full({1}, 1.0)};
  EXPECT_DOUBLE_EQ(PerTokenGradientNorm(gradient, 200, 50), 2.0 * 4.0);
  EXPECT_EQ(PerTokenGradientNorm(gradient, 200, 0), 0.0);
}

}  // namespace
}  // namespace slimfit::server
