// One-line logs of the daemons (slimfit-coordinator, slimfit-worker) on stderr:
//   2026-11-22T10:15:03.123Z coordinator I job-000001 round 3/20: loss 2.113, 5120 tok/s
// The level letter is I (info), W (warning) or E (error). Lines from several threads never
// interleave. Tokens are never logged.
//
// Thread safety: thread-safe.
#ifndef SLIMFIT_BASE_LOG_H_
#define SLIMFIT_BASE_LOG_H_

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace slimfit::base {

enum class LogLevel { kInfo, kWarning, kError };

// Names the process in every line ("coordinator", "worker w-3f2a"); default "slimfit".
void SetLogComponent(absl::string_view component);
void LogLine(LogLevel level, absl::string_view message);

template <typename... Args>
void LogInfo(const Args&... args) {
  LogLine(LogLevel::kInfo, absl::StrCat(args...));
}
template <typename... Args>
void LogWarning(const Args&... args) {
  LogLine(LogLevel::kWarning, absl::StrCat(args...));
}
template <typename... Args>
void LogError(const Args&... args) {
  LogLine(LogLevel::kError, absl::StrCat(args...));
}

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_LOG_H_
