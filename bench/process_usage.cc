#include "bench/process_usage.h"

#include <unistd.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/files.h"

namespace slimfit::bench {
namespace {

// The value of "Key:   1234 kB" in /proc/PID/status, in bytes.
absl::StatusOr<int64_t> StatusKilobytes(absl::string_view status, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    int64_t kilobytes = 0;
    if (!absl::ConsumeSuffix(&line, "kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kilobytes)) {
      return absl::InvalidArgumentError(absl::StrCat("/proc status: malformed ", key, " line"));
    }
    return kilobytes * 1024;
  }
  return absl::InvalidArgumentError(absl::StrCat("/proc status: no ", key, " line"));
}

}  // namespace

absl::StatusOr<ProcessUsage> ParseProcessUsage(absl::string_view stat, absl::string_view status,
                                               int64_t ticks_per_second) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields start after the
  // last ')'. utime and stime are fields 14 and 15, num_threads field 20 (proc(5)).
  const size_t end_of_name = stat.rfind(')');
  if (end_of_name == absl::string_view::npos)
    return absl::InvalidArgumentError("/proc stat: no process name");
  std::vector<absl::string_view> fields =
      absl::StrSplit(stat.substr(end_of_name + 1), ' ', absl::SkipWhitespace());
  constexpr size_t kUtime = 14 - 3, kStime = 15 - 3, kThreads = 20 - 3;
  int64_t utime = 0, stime = 0, threads = 0;
  if (fields.size() <= kThreads || !absl::SimpleAtoi(fields[kUtime], &utime) ||
      !absl::SimpleAtoi(fields[kStime], &stime) || !absl::SimpleAtoi(fields[kThreads], &threads)) {
    return absl::InvalidArgumentError("/proc stat: too few or malformed fields");
  }
  if (ticks_per_second <= 0) return absl::InvalidArgumentError("ticks per second must be positive");
  ProcessUsage usage;
  usage.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(ticks_per_second);
  usage.threads = static_cast<int>(threads);
  absl::StatusOr<int64_t> rss = StatusKilobytes(status, "VmRSS");
  if (!rss.ok()) return rss.status();
  absl::StatusOr<int64_t> peak = StatusKilobytes(status, "VmHWM");
  if (!peak.ok()) return peak.status();
  usage.rss_bytes = *rss;
  usage.peak_rss_bytes = *peak;
  return usage;
}

absl::StatusOr<ProcessUsage> ReadProcessUsage(int pid) {
  const std::string dir = pid == 0 ? std::string("/proc/self") : absl::StrCat("/proc/", pid);
  absl::StatusOr<std::string> stat = base::ReadFileToString(dir + "/stat");
  if (!stat.ok()) return absl::NotFoundError(absl::StrCat("no process ", pid, ": ", stat.status().message()));
  absl::StatusOr<std::string> status = base::ReadFileToString(dir + "/status");
  if (!status.ok())
    return absl::NotFoundError(absl::StrCat("no process ", pid, ": ", status.status().message()));
  return ParseProcessUsage(*stat, *status, sysconf(_SC_CLK_TCK));
}

}  // namespace slimfit::bench
