#include "performer/emulated_thread_block.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace slimfit::performer {
namespace {

// Thread i writes s[i], then reads s[i − 1] (thread i − 1's write): racy without a Sync() between.
// Returns, for every thread, what it read.
std::vector<int> ShiftedReads(int64_t threads, EmulatedSchedule schedule, bool sync) {
  std::vector<int> s(threads, 0), read(threads, -1);
  RunEmulatedThreadBlock(
      threads,
      [&](const EmulatedThreads& t) {
        s[t.Index()] = static_cast<int>(t.Index()) + 1;
        if (sync) t.Sync();
        read[t.Index()] = t.Index() == 0 ? 0 : s[t.Index() - 1];
        t.Sync();
      },
      schedule);
  return read;
}

TEST(EmulatedThreadBlockTest, ASyncMakesEveryWriteVisibleInEverySchedule) {
  const std::vector<int> want = {0, 1, 2, 3, 4};
  for (EmulatedSchedule schedule :
       {EmulatedSchedule::kConcurrent, EmulatedSchedule::kInOrder, EmulatedSchedule::kReverseOrder}) {
    EXPECT_EQ(ShiftedReads(5, schedule, /*sync=*/true), want) << static_cast<int>(schedule);
  }
}

// Taking turns, the missing sync is seen deterministically: in order every earlier thread has
// written (the race happens to go right), in reverse none has.
TEST(EmulatedThreadBlockTest, TakingTurnsExposesAMissingSyncInOneOrder) {
  EXPECT_EQ(ShiftedReads(5, EmulatedSchedule::kInOrder, /*sync=*/false), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ShiftedReads(5, EmulatedSchedule::kReverseOrder, /*sync=*/false),
            (std::vector<int>{0, 0, 0, 0, 0}));
}

TEST(EmulatedThreadBlockTest, TakingTurnsRunsOneThreadAtATimeInTheirOrder) {
  for (EmulatedSchedule schedule : {EmulatedSchedule::kInOrder, EmulatedSchedule::kReverseOrder}) {
    std::atomic<int> running{0}, most{0};
    std::vector<int64_t> order;
    RunEmulatedThreadBlock(
        6,
        [&](const EmulatedThreads& t) {
          for (int phase = 0; phase < 3; ++phase) {
            const int now = ++running;
            int seen = most.load();
            while (now > seen && !most.compare_exchange_weak(seen, now)) {
            }
            order.push_back(t.Index());  // unsynchronised: safe only one at a time
            --running;
            t.Sync();
          }
        },
        schedule);
    EXPECT_EQ(most.load(), 1);
    std::vector<int64_t> want;
    for (int phase = 0; phase < 3; ++phase) {
      for (int64_t i = 0; i < 6; ++i) want.push_back(schedule == EmulatedSchedule::kInOrder ? i : 5 - i);
    }
    EXPECT_EQ(order, want);
  }
}

TEST(EmulatedThreadBlockTest, ThreadCountsOutsideABlocksAreErrors) {
  EXPECT_THROW(RunEmulatedThreadBlock(0, [](const EmulatedThreads&) {}), c10::Error);
  EXPECT_THROW(RunEmulatedThreadBlock(1025, [](const EmulatedThreads&) {}), c10::Error);
}

}  // namespace
}  // namespace slimfit::performer
