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

TEST(NormScreenTest, ARestoredSnapshotIsTheHistoryAsBeforeAThrownAwayTry) {
  NormScreen screen(/*factor=*/30, /*window=*/4, /*min_history=*/2);
  for (double norm : {1.0, 1.2, 0.9}) screen.Accept(norm);
  std::deque<double> before = screen.Snapshot();
  EXPECT_EQ(before, (std::deque<double>{1.0, 1.2, 0.9}));
  // A try of a round that is then thrown away: its norms push the oldest out of the window.
  for (double norm : {40.0, 50.0}) screen.Accept(norm);
  EXPECT_THAT(std::string(screen.Check(1e6).message()), HasSubstr("median 40 of the job's last 4 accepted"));
  EXPECT_TRUE(screen.Check(35.0).ok());
  screen.Restore(before);
  EXPECT_EQ(screen.Snapshot(), before);  // the dropped 1.0 is back too
  EXPECT_THAT(std::string(screen.Check(1e6).message()), HasSubstr("median 1 of the job's last 3 accepted"));
  EXPECT_FALSE(screen.Check(35.0).ok());
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
