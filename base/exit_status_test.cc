#include "base/exit_status.h"

#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

TEST(ExitCodeForStatusTest, MapsCodes) {
  EXPECT_EQ(ExitCodeForStatus(absl::OkStatus()), kExitOk);
  EXPECT_EQ(ExitCodeForStatus(absl::InvalidArgumentError("x")), kExitUsage);
  EXPECT_EQ(ExitCodeForStatus(absl::OutOfRangeError("x")), kExitUsage);
  EXPECT_EQ(ExitCodeForStatus(absl::NotFoundError("x")), kExitUsage);
  EXPECT_EQ(ExitCodeForStatus(absl::ResourceExhaustedError("x")), kExitFailure);
  EXPECT_EQ(ExitCodeForStatus(absl::InternalError("x")), kExitFailure);
  EXPECT_EQ(ExitCodeForStatus(absl::PermissionDeniedError("x")), kExitUsage);
  EXPECT_EQ(ExitCodeForStatus(absl::UnauthenticatedError("x")), kExitUsage);
  EXPECT_EQ(ExitCodeForStatus(absl::UnavailableError("x")), kExitFailure);
  EXPECT_EQ(ExitCodeForStatus(absl::FailedPreconditionError("x")), kExitFailure);
  EXPECT_EQ(ExitCodeForStatus(absl::DataLossError("x")), kExitFailure);
  EXPECT_EQ(ExitCodeForStatus(absl::CancelledError("x")), kExitFailure);
  EXPECT_EQ(ExitCodeForStatus(absl::AbortedError("x")), kExitFailure);
  EXPECT_EQ(ExitCodeForStatus(absl::DeadlineExceededError("x")), kExitFailure);
}

TEST(FormatErrorLineTest, IsExactlyOneLineNamingTheProgram) {
  EXPECT_EQ(FormatErrorLine("slimfit", "bad thing"), "slimfit: bad thing\n");
  EXPECT_EQ(FormatErrorLine("slimfit-worker", "a\nb\r\tc"), "slimfit-worker: a b  c\n");
}

}  // namespace
}  // namespace slimfit::base
