// What a process has used, from Linux's /proc: CPU seconds (user + system) since it started, its
// resident memory now and at its peak (VmRSS, VmHWM), its threads. bench/control_plane_load.cc
// reads the coordinator's this way before and after the load.
//
// Example:
//   absl::StatusOr<ProcessUsage> before = ReadProcessUsage(pid);
//   ... load ...
//   absl::StatusOr<ProcessUsage> after = ReadProcessUsage(pid);
//   double cpu = after->cpu_seconds - before->cpu_seconds;
//
// Thread safety: free functions without shared state.
#ifndef SLIMFIT_BENCH_PROCESS_USAGE_H_
#define SLIMFIT_BENCH_PROCESS_USAGE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit::bench {

struct ProcessUsage {
  double cpu_seconds = 0;      // user + system time since the process started
  int64_t rss_bytes = 0;       // resident set now (VmRSS)
  int64_t peak_rss_bytes = 0;  // highest resident set since the process started (VmHWM)
  int threads = 0;
};

// Parses the text of /proc/PID/stat and /proc/PID/status; `ticks_per_second` is
// sysconf(_SC_CLK_TCK). INVALID_ARGUMENT naming what is missing or malformed.
absl::StatusOr<ProcessUsage> ParseProcessUsage(absl::string_view stat, absl::string_view status,
                                               int64_t ticks_per_second);

// The usage of process `pid` (0: this process). NOT_FOUND when there is no such process; what
// ParseProcessUsage says otherwise.
absl::StatusOr<ProcessUsage> ReadProcessUsage(int pid);

}  // namespace slimfit::bench

#endif  // SLIMFIT_BENCH_PROCESS_USAGE_H_
