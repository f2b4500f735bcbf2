// EventSignal and WorkerLeases: the coordinator's two small synchronisation pieces.
#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "server/event_signal.h"
#include "server/worker_leases.h"

namespace slimfit::server {
namespace {

// The timeout is on the signal's clock: a waiter stays until the clock reaches it, or a Notify.
TEST(EventSignalTest, WaitReturnsOnNotifyOrTimeout) {
  base::ManualClock clock;
  EventSignal signal(&clock);
  const uint64_t seen = signal.count();
  uint64_t timed_out = 0;
  std::thread waiter([&] { timed_out = signal.WaitAfter(seen, absl::Seconds(20)); });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(absl::Seconds(19));
  EXPECT_EQ(clock.waiters(), 1);  // not yet
  clock.Advance(absl::Seconds(1));
  waiter.join();
  EXPECT_EQ(timed_out, seen);

  uint64_t notified = 0;
  std::thread listener([&] { notified = signal.WaitAfter(seen, absl::Seconds(30)); });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  signal.Notify();
  listener.join();
  EXPECT_EQ(notified, seen + 1);
  EXPECT_EQ(signal.WaitAfter(seen, absl::Seconds(30)), seen + 1);  // already moved: no wait
}

TEST(WorkerLeasesTest, OneHolderPerWorkerAndGivingUp) {
  WorkerLeases leases;
  std::atomic<bool> give_up{false};
  std::shared_ptr<void> first = leases.Acquire("w-1", &give_up);
  ASSERT_NE(first, nullptr);
  std::shared_ptr<void> other = leases.Acquire("w-2", &give_up);  // another worker: free
  EXPECT_NE(other, nullptr);
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    std::shared_ptr<void> second = leases.Acquire("w-1", &give_up);
    acquired = second != nullptr;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(acquired.load());
  first.reset();  // released: the waiter gets it
  waiter.join();
  EXPECT_TRUE(acquired.load());

  std::shared_ptr<void> held = leases.Acquire("w-1", &give_up);
  give_up = true;
  EXPECT_EQ(leases.Acquire("w-1", &give_up), nullptr);
}

}  // namespace
}  // namespace slimfit::server
