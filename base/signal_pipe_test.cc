#include "base/signal_pipe.h"

#include <signal.h>

#include <thread>

#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

TEST(SignalPipeTest, DeliversSignalsInOrderAndWakes) {
  absl::StatusOr<std::unique_ptr<SignalPipe>> pipe = SignalPipe::Install({SIGUSR1, SIGUSR2, SIGHUP});
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  ASSERT_EQ(raise(SIGUSR1), 0);  // the process would end here without the handler
  ASSERT_EQ(raise(SIGHUP), 0);
  EXPECT_EQ((*pipe)->Wait(), SIGUSR1);
  EXPECT_EQ((*pipe)->Wait(), SIGHUP);
  std::thread waker([&] { (*pipe)->Wake(); });
  EXPECT_EQ((*pipe)->Wait(), 0);
  waker.join();
  EXPECT_EQ((*pipe)->Wait(), 0);  // stays woken
}

TEST(SignalPipeTest, OnePerProcessAndBadSignalsRefused) {
  absl::StatusOr<std::unique_ptr<SignalPipe>> first = SignalPipe::Install({SIGUSR1});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(SignalPipe::Install({SIGUSR2}).status().code(), absl::StatusCode::kFailedPrecondition);
  first->reset();
  EXPECT_TRUE(SignalPipe::Install({SIGUSR2}).ok());  // released by the destructor
  EXPECT_EQ(SignalPipe::Install({SIGKILL}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SignalPipe::Install({0}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SignalNameTest, NamesCommonSignals) {
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGINT), "SIGINT");
  EXPECT_EQ(SignalName(SIGHUP), "SIGHUP");
  EXPECT_EQ(SignalName(SIGSEGV), "signal 11");
}

}  // namespace
}  // namespace slimfit::base
