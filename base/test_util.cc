#include "base/test_util.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
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

std::string TempPath(absl::string_view name) {
  return absl::StrCat(EnvOr("TEST_TMPDIR", "/tmp"), "/", name);
}

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

}  // namespace slimfit::testing_util
