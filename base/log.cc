#include "base/log.h"

#include <cstdio>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace slimfit::base {
namespace {

absl::Mutex log_mutex;
std::string& Component() {
  static std::string* component = new std::string("slimfit");
  return *component;
}

}  // namespace

void SetLogComponent(absl::string_view component) {
  absl::MutexLock lock(&log_mutex);
  Component() = std::string(component);
}

void LogLine(LogLevel level, absl::string_view message) {
  const char letter = level == LogLevel::kInfo ? 'I' : level == LogLevel::kWarning ? 'W' : 'E';
  const std::string time = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  absl::MutexLock lock(&log_mutex);
  std::fprintf(stderr, "%s %s %c %.*s\n", time.c_str(), Component().c_str(), letter,
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

}  // namespace slimfit::base
