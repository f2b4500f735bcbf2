#include "base/clock.h"

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

TEST(ManualClockTest, MovesOnlyWhenTold) {
  ManualClock clock(kStart);
  EXPECT_EQ(clock.Now(), kStart);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now(), kStart + absl::Seconds(3));
  clock.Advance(-absl::Seconds(10));  // never backwards through Advance
  EXPECT_EQ(clock.Now(), kStart + absl::Seconds(3));
  clock.SetTime(kStart - absl::Hours(1));  // SetTime may jump either way
  EXPECT_EQ(clock.Now(), kStart - absl::Hours(1));
}

// A waiter whose condition already holds, or whose deadline already passed, does not wait.
TEST(ManualClockTest, ReturnsAtOnceWhenConditionHoldsOrDeadlinePassed) {
  ManualClock clock(kStart);
  absl::Mutex mu;
  bool flag = true;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(clock.AwaitWithDeadline(&mu, absl::Condition(&flag), absl::InfiniteFuture()));
  flag = false;
  EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&flag), kStart));
  EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&flag), kStart - absl::Seconds(1)));
  EXPECT_EQ(clock.waiters(), 0);
}

// The deadline is on the manual clock: the waiter stays blocked through Advance calls that fall
// short of it and returns false once one reaches it.
TEST(ManualClockTest, AdvancingToTheDeadlineEndsTheWait) {
  ManualClock clock(kStart);
  absl::Mutex mu;
  bool flag = false;
  bool returned = false, result = true;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&flag), kStart + absl::Seconds(10));
    returned = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(absl::Seconds(9));
  {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(returned);  // 1 s short: still waiting
  }
  EXPECT_EQ(clock.waiters(), 1);
  clock.Advance(absl::Seconds(1));
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_FALSE(result);
  EXPECT_EQ(clock.waiters(), 0);
}

// The condition coming true (under the mutex) ends the wait before the deadline, and the wait
// reports it.
TEST(ManualClockTest, ConditionEndsTheWaitBeforeTheDeadline) {
  ManualClock clock(kStart);
  absl::Mutex mu;
  bool flag = false;
  bool result = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&flag), absl::InfiniteFuture());
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  {
    absl::MutexLock lock(&mu);
    flag = true;
  }
  waiter.join();
  EXPECT_TRUE(result);
  EXPECT_EQ(clock.Now(), kStart);
}

// Several waiters, on different mutexes and deadlines: each Advance releases exactly those whose
// deadline it reached.
TEST(ManualClockTest, WakesEachWaiterAtItsOwnDeadline) {
  ManualClock clock(kStart);
  absl::Mutex mu_a, mu_b;
  bool never = false;
  absl::Mutex done_mutex;
  int done = 0;
  auto wait = [&](absl::Mutex* mu, absl::Duration after) {
    {
      absl::MutexLock lock(mu);
      clock.AwaitWithDeadline(mu, absl::Condition(&never), kStart + after);
    }
    absl::MutexLock lock(&done_mutex);
    ++done;
  };
  std::thread a(wait, &mu_a, absl::Seconds(5));
  std::thread b(wait, &mu_b, absl::Seconds(20));
  std::thread c(wait, &mu_a, absl::Seconds(20));
  ASSERT_TRUE(clock.AwaitWaiters(3));
  clock.Advance(absl::Seconds(5));
  a.join();
  EXPECT_EQ(clock.waiters(), 2);
  {
    absl::MutexLock lock(&done_mutex);
    EXPECT_EQ(done, 1);
  }
  clock.SetTime(kStart + absl::Minutes(1));
  b.join();
  c.join();
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(ManualClockTest, SleepForReturnsWhenTheClockGetsThere) {
  ManualClock clock(kStart);
  std::thread sleeper([&] { clock.SleepFor(absl::Minutes(10)); });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(absl::Minutes(9));
  EXPECT_EQ(clock.waiters(), 1);
  clock.Advance(absl::Minutes(1));
  sleeper.join();
  EXPECT_EQ(clock.waiters(), 0);
}

// Many threads waiting and waking while the clock moves on another: nothing is lost or left
// blocked (a stress test of the wake-up protocol; under TSan a data race would show).
TEST(ManualClockTest, ConcurrentWaitersAndAdvancesAllFinish) {
  ManualClock clock(kStart);
  constexpr int kThreads = 8, kRounds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&clock, t] {
      for (int i = 1; i <= kRounds; ++i) {
        absl::Mutex mu;  // a mutex that dies right after its wait
        bool never = false;
        absl::MutexLock lock(&mu);
        clock.AwaitWithDeadline(&mu, absl::Condition(&never), kStart + absl::Seconds(i + t % 2));
      }
    });
  }
  for (int i = 1; i <= kRounds + 1; ++i) {
    clock.AwaitWaiters(kThreads, absl::Milliseconds(100));  // best effort: advancing early is fine too
    clock.Advance(absl::Seconds(1));
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(ManualClockTest, AwaitWaitersTimesOutWhenNobodyWaits) {
  ManualClock clock(kStart);
  EXPECT_FALSE(clock.AwaitWaiters(1, absl::Milliseconds(1)));
}

TEST(RealClockTest, FollowsTheWallClockAndTimesOut) {
  Clock& clock = RealClock();
  EXPECT_EQ(&clock, &RealClock());
  const absl::Time before = absl::Now();
  const absl::Time now = clock.Now();
  EXPECT_GE(now, before);
  EXPECT_LE(now, absl::Now());
  absl::Mutex mu;
  bool never = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&never), clock.Now() + absl::Milliseconds(1)));
  EXPECT_GE(clock.Now(), now + absl::Milliseconds(1));
}

}  // namespace
}  // namespace slimfit::base
