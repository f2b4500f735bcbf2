// EventSignal and WorkerLeases: the coordinator's two small synchronisation pieces.
#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/event_signal.h"
#include "server/worker_leases.h"

namespace slimfit::server {
namespace {

TEST(EventSignalTest, WaitReturnsOnNotifyOrTimeout) {
  EventSignal signal;
  const uint64_t seen = signal.count();
  EXPECT_EQ(signal.WaitAfter(seen, absl::Milliseconds(20)), seen);  // times out
  std::thread notifier([&] {
    absl::SleepFor(absl::Milliseconds(20));
    signal.Notify();
  });
  EXPECT_EQ(signal.WaitAfter(seen, absl::Seconds(30)), seen + 1);
  notifier.join();
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
