#include "base/service_notify.h"

#include <cstdlib>
#include <string>

#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

TEST(ServiceNotify, MessagesAsSystemdReadsThem) {
  EXPECT_EQ(NotifyMessage("READY=1", ""), "READY=1");
  EXPECT_EQ(NotifyMessage("READY=1", "serving on 127.0.0.1:50051"),
            "READY=1\nSTATUS=serving on 127.0.0.1:50051");
  EXPECT_EQ(NotifyMessage("", "two\nlines"), "STATUS=two lines");
}

TEST(ServiceNotify, SendsToTheNotifySocket) {
  testing_util::FakeNotifySocket manager;
  ASSERT_TRUE(manager.bound());
  ASSERT_TRUE(NotifyReady("serving").ok());
  EXPECT_EQ(manager.ReceiveUntil("READY", absl::Seconds(5)), "READY=1\nSTATUS=serving");
  ASSERT_TRUE(NotifyReloading().ok());
  EXPECT_EQ(manager.ReceiveUntil("RELOADING", absl::Seconds(5)), "RELOADING=1");
  ASSERT_TRUE(NotifyStatus("3 jobs").ok());
  EXPECT_EQ(manager.ReceiveUntil("STATUS", absl::Seconds(5)), "STATUS=3 jobs");
  ASSERT_TRUE(NotifyStopping("SIGTERM").ok());
  EXPECT_EQ(manager.ReceiveUntil("STOPPING", absl::Seconds(5)), "STOPPING=1\nSTATUS=SIGTERM");
}

TEST(ServiceNotify, DoesNothingOutsideAServiceManager) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(NotifyReady("serving").ok());
  EXPECT_TRUE(NotifyStopping().ok());
}

TEST(ServiceNotify, AnUnreachableSocketIsAnError) {
  setenv("NOTIFY_SOCKET", "@slimfit-nobody-listens-here", 1);
  const absl::Status status = NotifyReady();
  unsetenv("NOTIFY_SOCKET");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace slimfit::base
