#include "server/shard_split.h"

#include <numeric>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace slimfit::server {
namespace {

using ::testing::ElementsAre;

TEST(ShardSplitTest, ProportionalToSpeedAndComplete) {
  EXPECT_THAT(SplitBySpeed(12, {1.0, 2.0, 3.0}), ElementsAre(2, 4, 6));
  EXPECT_THAT(SplitBySpeed(10, {1.0, 1.0, 1.0}), ElementsAre(4, 3, 3));
  EXPECT_THAT(SplitBySpeed(1, {1.0, 5.0}), ElementsAre(0, 1));  // the faster takes the remainder
  EXPECT_THAT(SplitBySpeed(0, {1.0, 2.0}), ElementsAre(0, 0));
  for (int64_t items : {1, 7, 100, 1001}) {
    std::vector<int64_t> counts = SplitBySpeed(items, {0.3, 1.7, 2.9, 0.01});
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), items);
  }
}

TEST(ShardSplitTest, ShardsFitOneRequest) {
  EXPECT_EQ(MaxSequencesPerShard(1024, 1), 1024);
  EXPECT_EQ(MaxSequencesPerShard(1024, 2), 512);
  EXPECT_EQ(MaxSequencesPerShard(1 << 20, 1), 1);
}

}  // namespace
}  // namespace slimfit::server
