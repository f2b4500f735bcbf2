#include "server/shard_split.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

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

TEST(ShardSplitTest, CutsEachShareByItemsAndWeight) {
  // Worker 0 takes items 0..4, worker 1 items 5..6, worker 2 none; at most 2 items per shard.
  const std::vector<ShardCut> by_items = CutShards({5, 2, 0}, 2, 100, [](int64_t) { return 1; });
  ASSERT_EQ(by_items.size(), 4u);
  EXPECT_EQ(by_items[0].worker, 0u);
  EXPECT_EQ(by_items[0].begin, 0);
  EXPECT_EQ(by_items[0].end, 2);
  EXPECT_EQ(by_items[2].begin, 4);
  EXPECT_EQ(by_items[2].end, 5);
  EXPECT_EQ(by_items[3].worker, 1u);
  EXPECT_EQ(by_items[3].begin, 5);
  EXPECT_EQ(by_items[3].end, 7);
  // Weights 3, 3, 9, 1 with at most 6 per shard: {0, 1}, {2} (heavier alone), {3}.
  const std::vector<int64_t> weights = {3, 3, 9, 1};
  const std::vector<ShardCut> by_weight =
      CutShards({4}, 10, 6, [&](int64_t item) { return weights[static_cast<size_t>(item)]; });
  ASSERT_EQ(by_weight.size(), 3u);
  EXPECT_EQ(by_weight[0].end, 2);
  EXPECT_EQ(by_weight[1].end, 3);
  EXPECT_EQ(by_weight[2].end, 4);
}

}  // namespace
}  // namespace slimfit::server
