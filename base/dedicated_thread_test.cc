#include "base/dedicated_thread.h"

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

// Every callable runs on the object's one thread, never the caller's, and Run returns after it.
TEST(DedicatedThreadTest, RunsEveryCallableOnItsOwnThreadAndWaitsForIt) {
  DedicatedThread thread;
  std::thread::id ran_on;
  int value = 0;
  for (int i = 1; i <= 3; ++i) {
    thread.Run([&] {
      ran_on = std::this_thread::get_id();
      value = i;  // written on the thread, read by the caller after Run
    });
    EXPECT_EQ(value, i);
    EXPECT_EQ(ran_on, thread.id());
    EXPECT_NE(ran_on, std::this_thread::get_id());
  }
}

// Callers on many threads: one callable at a time, all on the one thread, none lost.
TEST(DedicatedThreadTest, CallsFromManyThreadsRunOneAtATime) {
  DedicatedThread thread;
  std::atomic<int> running{0}, most{0}, count{0};
  absl::Mutex mutex;
  std::set<std::thread::id> threads;
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        thread.Run([&] {
          const int now = ++running;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          {
            absl::MutexLock lock(&mutex);
            threads.insert(std::this_thread::get_id());
          }
          ++count;
          --running;
        });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(count.load(), 200);
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(threads.size(), 1u);
}

// A callable that throws anyway does not end the thread: Run returns, and the next one runs.
TEST(DedicatedThreadTest, AThrowingCallableDoesNotEndTheThread) {
  DedicatedThread thread;
  thread.Run([] { throw std::runtime_error("escaped"); });
  bool ran = false;
  thread.Run([&] { ran = true; });
  EXPECT_TRUE(ran);
}

// Destroyed right after creation, or with nothing ever run: joins cleanly.
TEST(DedicatedThreadTest, DestroysCleanlyWhenIdle) {
  for (int i = 0; i < 20; ++i) {
    DedicatedThread thread;
  }
  DedicatedThread used;
  used.Run([] {});
}

}  // namespace
}  // namespace slimfit::base
