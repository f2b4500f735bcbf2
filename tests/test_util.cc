#include "tests/test_util.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace slimfit::testing_util {
namespace {

// The environment variable `name`, or `fallback` when it is unset.
absl::string_view EnvOr(const char* name, absl::string_view fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? absl::string_view(value) : fallback;
}

}  // namespace

std::string TempPath(absl::string_view name) {
  return absl::StrCat(EnvOr("TEST_TMPDIR", "/tmp"), "/", name);
}

std::string RunfilePath(absl::string_view workspace_relative_path) {
  return absl::StrCat(EnvOr("TEST_SRCDIR", "."), "/", EnvOr("TEST_WORKSPACE", "slimfit"), "/",
                      workspace_relative_path);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error_number = errno;
    return absl::ErrnoToStatus(error_number, absl::StrCat("cannot open ", path));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", path));
  return contents.str();
}

}  // namespace slimfit::testing_util
