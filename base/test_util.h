// Small helpers shared by the tests of every package: where a test may write files ($TEST_TMPDIR)
// and where Bazel put its data files (runfiles under $TEST_SRCDIR). Read files back with
// base::ReadFileToString (base/files.h).
//
// Example:
//   const std::string path = slimfit::testing_util::TempPath("profile.txtpb");
//   ASSERT_TRUE(WriteDeviceProfile(path, profile).ok());
//   absl::StatusOr<std::string> written = slimfit::base::ReadFileToString(path);
//   ASSERT_TRUE(written.ok()) << written.status();
//
//   const std::string profile = slimfit::testing_util::RunfilePath("client/testdata/tiny_cpu.profile");
//
// Test-only (testonly = 1). Thread safety: the path functions only read the environment and may
// be called concurrently.
#ifndef SLIMFIT_BASE_TEST_UTIL_H_
#define SLIMFIT_BASE_TEST_UTIL_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace slimfit::testing_util {

// `name` inside the test's private scratch directory, $TEST_TMPDIR (which `bazel test` sets and
// empties for every run), or inside /tmp when that is unset (a test binary run by hand). Nothing
// is created; `name` may contain sub-directories, and "" gives the directory itself followed by
// "/".
std::string TempPath(absl::string_view name);

// The runfile at `workspace_relative_path` ("client/testdata/lengths.txt", a data dependency of
// the test or a binary it runs): $TEST_SRCDIR/$TEST_WORKSPACE/<path>, where the workspace
// defaults to "slimfit" and the source directory to "." when `bazel test` did not set them.
// Does not check that the file exists.
std::string RunfilePath(absl::string_view workspace_relative_path);

// Writes `contents` to TempPath(name) and returns that path. A failure fails the calling test
// (ADD_FAILURE) and still returns the path, so the test goes on to fail where it reads the file.
std::string WriteTempFile(absl::string_view name, absl::string_view contents);

// systemd's notification socket, played by a datagram socket in the abstract namespace: while it
// lives, $NOTIFY_SOCKET names it, for this process and the daemons it starts (base/service_notify.h).
class FakeNotifySocket {
 public:
  FakeNotifySocket();
  ~FakeNotifySocket();  // unsets $NOTIFY_SOCKET
  FakeNotifySocket(const FakeNotifySocket&) = delete;
  FakeNotifySocket& operator=(const FakeNotifySocket&) = delete;

  bool bound() const { return bound_; }
  // The messages received until one contains `want`, or until `timeout`, joined by " | ".
  std::string ReceiveUntil(absl::string_view want, absl::Duration timeout);

 private:
  int fd_ = -1;
  bool bound_ = false;
};

}  // namespace slimfit::testing_util

#endif  // SLIMFIT_BASE_TEST_UTIL_H_
