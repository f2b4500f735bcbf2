#include "base/thread.h"

#include <stdexcept>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ThreadTest, JoinReturnsTheBodysStatusEveryTime) {
  std::thread::id ran_on;
  Thread thread("answer", [&] {
    ran_on = std::this_thread::get_id();
    return absl::NotFoundError("no shard 7");
  });
  EXPECT_TRUE(thread.joinable());
  EXPECT_EQ(thread.name(), "answer");
  const absl::Status first = thread.Join();
  EXPECT_EQ(first, absl::NotFoundError("no shard 7"));
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(thread.joinable());
  EXPECT_TRUE(thread.done());
  EXPECT_EQ(thread.Join(), first);  // idempotent

  Thread ok("ok", [] { return absl::OkStatus(); });
  EXPECT_TRUE(ok.Join().ok());
}

TEST(ThreadTest, AnExceptionBecomesAnInternalStatusNamingTheThread) {
  Thread standard("liveness", []() -> absl::Status {
    throw std::runtime_error("out of memory\nException raised from somewhere (backtrace follows)");
  });
  const absl::Status status = standard.Join();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "thread liveness: uncaught exception: out of memory");

  Thread other("heartbeats", []() -> absl::Status { throw 42; });
  const absl::Status odd = other.Join();
  EXPECT_EQ(odd.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(odd.message(), HasSubstr("thread heartbeats: uncaught exception (not a std::exception)"));
}

TEST(ThreadTest, CatchExceptionsOnTheCallersThread) {
  EXPECT_EQ(CatchExceptions("step", [] { return absl::AbortedError("stale"); }), absl::AbortedError("stale"));
  const absl::Status thrown = CatchExceptions("step", []() -> absl::Status { throw std::bad_alloc(); });
  EXPECT_EQ(thrown.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(thrown.message(), HasSubstr("step: uncaught exception: "));
  EXPECT_THAT(thrown.message(), Not(HasSubstr("\n")));
}

TEST(ThreadTest, NeverStartedAndMovedFrom) {
  Thread none;
  EXPECT_FALSE(none.joinable());
  EXPECT_FALSE(none.done());
  EXPECT_EQ(none.Join().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(none.WaitUntilDone(absl::InfinitePast()));

  Thread started("moved", [] { return absl::CancelledError("stopped"); });
  Thread taken = std::move(started);
  EXPECT_EQ(started.Join().code(), absl::StatusCode::kFailedPrecondition);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(taken.Join(), absl::CancelledError("stopped"));
  none = std::move(taken);  // takes a joined thread: nothing to wait for
  EXPECT_FALSE(none.joinable());
}

TEST(ThreadTest, WaitUntilDoneHonoursItsDeadline) {
  absl::Notification release;
  Thread thread("waits", [&] {
    release.WaitForNotification();
    return absl::OkStatus();
  });
  EXPECT_FALSE(thread.WaitUntilDone(absl::Now()));  // blocked on `release`: cannot have ended
  EXPECT_FALSE(thread.done());
  release.Notify();
  EXPECT_TRUE(thread.WaitUntilDone(absl::InfiniteFuture()));
  EXPECT_TRUE(thread.done());
  EXPECT_TRUE(thread.Join().ok());
}

// The group wakes its owner at each end (not at a timeout), and JoinAll reports the first failure
// in start order even when a later thread fails first.
TEST(ThreadGroupTest, WakesAtEachEndAndReportsTheFirstFailureInStartOrder) {
  absl::Notification release_first, release_second;
  ThreadGroup group;
  group.Start("first", [&]() -> absl::Status {
    release_first.WaitForNotification();
    throw std::runtime_error("allocation failed");
  });
  group.Start("second", [&] {
    release_second.WaitForNotification();
    return absl::UnavailableError("worker gone");
  });
  group.Start("third", [] { return absl::OkStatus(); });
  // "third" ends on its own; the others wait for their releases, so not all have ended.
  EXPECT_FALSE(group.WaitForAnEnd(absl::InfiniteDuration()));
  release_second.Notify();
  EXPECT_FALSE(group.WaitForAnEnd(absl::InfiniteDuration()));  // "second"; "first" still waits
  EXPECT_TRUE(group.failed());
  release_first.Notify();
  EXPECT_TRUE(group.WaitForAnEnd(absl::InfiniteDuration()));
  const absl::Status status = group.JoinAll();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "thread first: uncaught exception: allocation failed");
}

TEST(ThreadGroupTest, AllOkAndEmpty) {
  ThreadGroup empty;
  EXPECT_TRUE(empty.WaitForAnEnd(absl::InfiniteDuration()));
  EXPECT_TRUE(empty.JoinAll().ok());

  ThreadGroup group;
  for (int i = 0; i < 4; ++i) group.Start("worker", [] { return absl::OkStatus(); });
  while (!group.WaitForAnEnd(absl::InfiniteDuration())) {
  }
  EXPECT_FALSE(group.failed());
  EXPECT_TRUE(group.JoinAll().ok());
}

TEST(ThreadGroupTest, TimesOutWhileAThreadRuns) {
  absl::Notification release;
  ThreadGroup group;
  group.Start("blocked", [&] {
    release.WaitForNotification();
    return absl::OkStatus();
  });
  EXPECT_FALSE(group.WaitForAnEnd(absl::ZeroDuration()));
  release.Notify();
  EXPECT_TRUE(group.JoinAll().ok());
}

}  // namespace
}  // namespace slimfit::base
