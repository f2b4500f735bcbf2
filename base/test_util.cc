#include "base/test_util.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "gtest/gtest.h"

namespace slimfit::testing_util {
namespace {

// The environment variable `name`, or `fallback` when it is unset.
absl::string_view EnvOr(const char* name, absl::string_view fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? absl::string_view(value) : fallback;
}

}  // namespace

std::string TempPath(absl::string_view name) { return absl::StrCat(EnvOr("TEST_TMPDIR", "/tmp"), "/", name); }

std::string RunfilePath(absl::string_view workspace_relative_path) {
  return absl::StrCat(EnvOr("TEST_SRCDIR", "."), "/", EnvOr("TEST_WORKSPACE", "slimfit"), "/",
                      workspace_relative_path);
}

std::string WriteTempFile(absl::string_view name, absl::string_view contents) {
  const std::string path = TempPath(name);
  if (absl::Status written = base::WriteFileAtomically(path, contents); !written.ok()) {
    ADD_FAILURE() << written;
  }
  return path;
}

FakeNotifySocket::FakeNotifySocket() {
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const std::string name =
      absl::StrCat("slimfit-test-notify-", getpid(), "-", reinterpret_cast<uintptr_t>(this));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  const socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  bound_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&address), length) == 0;
  setenv("NOTIFY_SOCKET", absl::StrCat("@", name).c_str(), 1);
}

FakeNotifySocket::~FakeNotifySocket() {
  unsetenv("NOTIFY_SOCKET");
  if (fd_ >= 0) close(fd_);
}

std::string FakeNotifySocket::ReceiveUntil(absl::string_view want, absl::Duration timeout) {
  std::string seen;
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    char buffer[1024];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n <= 0) {
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    const std::string message(buffer, static_cast<size_t>(n));
    absl::StrAppend(&seen, seen.empty() ? "" : " | ", message);
    if (absl::StrContains(message, want)) break;
  }
  return seen;
}

}  // namespace slimfit::testing_util
