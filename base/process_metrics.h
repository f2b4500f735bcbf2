// The standard process metrics every Prometheus client library exports, for slimfit's daemons: an
// operator's first questions of a process (how much memory, how much CPU, since when, how many
// files) answered on the same /metrics as the service's own families. Read from /proc at each
// scrape (Linux):
//   process_resident_memory_bytes       resident set size now (base::ResidentBytes)
//   process_resident_memory_max_bytes   its peak since the process started (VmHWM)
//   process_virtual_memory_bytes        virtual size
//   process_cpu_seconds_total           user + system CPU time
//   process_start_time_seconds          start time, seconds since the Unix epoch
//   process_open_fds, process_max_fds   open file descriptors, and their limit (RLIMIT_NOFILE)
//   process_threads                     threads of the process
// A value that cannot be read is left out of that scrape.
//
// Thread safety: AddProcessMetrics once at start-up, like any registration.
#ifndef SLIMFIT_BASE_PROCESS_METRICS_H_
#define SLIMFIT_BASE_PROCESS_METRICS_H_

#include "base/metrics.h"

namespace slimfit::base {

void AddProcessMetrics(MetricRegistry* registry);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_PROCESS_METRICS_H_
