#include "base/exit_status.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace slimfit::base {

int ExitCodeForStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

std::string FormatErrorLine(absl::string_view program, absl::string_view message) {
  std::string line = absl::StrCat(program, ": ", message);
  std::replace_if(
      line.begin(), line.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
  line.push_back('\n');
  return line;
}

}  // namespace slimfit::base
