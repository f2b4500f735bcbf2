#include "base/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/process_memory.h"

namespace slimfit::base {
namespace {

enum Family {
  kResident,
  kResidentMax,
  kVirtual,
  kCpu,
  kStart,
  kOpenFds,
  kMaxFds,
  kThreads,
};

std::vector<MetricFamily> Families() {
  auto family = [](const char* name, const char* help, MetricType type) {
    MetricFamily f;
    f.name = name;
    f.help = help;
    f.type = type;
    return f;
  };
  return {
      family("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::kGauge),
      family("process_resident_memory_max_bytes",
             "Peak resident memory size in bytes since the process started.", MetricType::kGauge),
      family("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::kGauge),
      family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
             MetricType::kCounter),
      family("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
             MetricType::kGauge),
      family("process_open_fds", "Number of open file descriptors.", MetricType::kGauge),
      family("process_max_fds", "Maximum number of open file descriptors.", MetricType::kGauge),
      family("process_threads", "Number of OS threads in the process.", MetricType::kGauge),
  };
}

void Set(std::vector<MetricFamily>* families, Family which, double value) {
  MetricSample sample;
  sample.value = value;
  (*families)[which].samples.push_back(std::move(sample));
}

// The fields of /proc/self/stat after the command name (which may hold spaces and parentheses):
// fields[0] is the state, field N of proc(5) is fields[N - 3].
std::optional<std::vector<std::string>> StatFields() {
  std::ifstream file("/proc/self/stat");
  std::string line;
  if (!std::getline(file, line)) return std::nullopt;
  const size_t end_of_name = line.rfind(')');
  if (end_of_name == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(end_of_name + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(field);
  if (fields.size() < 22) return std::nullopt;
  return fields;
}

// Seconds since the epoch at which the machine booted (/proc/stat "btime").
std::optional<double> BootTime() {
  std::ifstream file("/proc/stat");
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("btime ", 0) == 0) return std::strtod(line.c_str() + 6, nullptr);
  }
  return std::nullopt;
}

std::optional<double> PeakResidentBytes() {
  std::ifstream file("/proc/self/status");
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) * 1024;  // kB
  }
  return std::nullopt;
}

std::optional<double> OpenFileDescriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory stream's own descriptor
}

void Collect(std::vector<MetricFamily>* families) {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (const std::optional<std::vector<std::string>> stat = StatFields()) {
    const std::vector<std::string>& f = *stat;
    // proc(5): utime 14, stime 15, num_threads 20, starttime 22, vsize 23.
    Set(families, kCpu, (std::strtod(f[11].c_str(), nullptr) + std::strtod(f[12].c_str(), nullptr)) / ticks);
    Set(families, kThreads, std::strtod(f[17].c_str(), nullptr));
    if (const std::optional<double> boot = BootTime()) {
      Set(families, kStart, *boot + std::strtod(f[19].c_str(), nullptr) / ticks);
    }
    Set(families, kVirtual, std::strtod(f[20].c_str(), nullptr));
  }
  if (const int64_t resident = ResidentBytes(); resident > 0)
    Set(families, kResident, static_cast<double>(resident));
  if (const std::optional<double> peak = PeakResidentBytes()) Set(families, kResidentMax, *peak);
  if (const std::optional<double> open = OpenFileDescriptors()) Set(families, kOpenFds, *open);
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    Set(families, kMaxFds, static_cast<double>(limit.rlim_cur));
  }
}

}  // namespace

void AddProcessMetrics(MetricRegistry* registry) { registry->AddCollector(Families(), Collect); }

}  // namespace slimfit::base
