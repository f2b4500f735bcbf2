#include "base/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

// The unlabelled samples of an exposition, by name.
std::map<std::string, double> Samples(const MetricRegistry& registry) {
  std::map<std::string, double> samples;
  std::istringstream text(registry.Exposition());
  for (std::string line; std::getline(text, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    samples[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return samples;
}

TEST(ProcessMetricsTest, ExportsTheStandardFamiliesWithValuesThatFollowTheProcess) {
  MetricRegistry registry;
  AddProcessMetrics(&registry);
  ASSERT_TRUE(registry.registration_status().ok()) << registry.registration_status();
  std::map<std::string, double> before = Samples(registry);
  for (const char* name :
       {"process_resident_memory_bytes", "process_resident_memory_max_bytes", "process_virtual_memory_bytes",
        "process_cpu_seconds_total", "process_start_time_seconds", "process_open_fds", "process_max_fds",
        "process_threads"}) {
    EXPECT_EQ(before.count(name), 1u) << name << " missing from\n" << registry.Exposition();
  }
  EXPECT_GT(before["process_resident_memory_bytes"], 0);
  EXPECT_GE(before["process_resident_memory_max_bytes"], before["process_resident_memory_bytes"]);
  EXPECT_GE(before["process_virtual_memory_bytes"], before["process_resident_memory_bytes"]);
  EXPECT_GE(before["process_threads"], 1);
  EXPECT_GE(before["process_max_fds"], before["process_open_fds"]);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(before["process_start_time_seconds"], now + 1);
  EXPECT_GT(before["process_start_time_seconds"], now - 3600);  // a test started within the hour

  // 64 MiB touched, one more descriptor, some CPU time: each shows in the next scrape.
  const size_t bytes = size_t{64} << 20;
  std::unique_ptr<char[]> block(new char[bytes]);
  std::memset(block.get(), 1, bytes);
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  volatile double spin = 0;
  const clock_t start = std::clock();
  while (std::clock() - start < CLOCKS_PER_SEC / 5) spin = spin + 1;  // ~0.2 s of CPU
  std::map<std::string, double> after = Samples(registry);
  close(fd);
  EXPECT_GE(after["process_resident_memory_bytes"] - before["process_resident_memory_bytes"], 60 << 20);
  EXPECT_GE(after["process_resident_memory_max_bytes"], after["process_resident_memory_bytes"]);
  EXPECT_EQ(after["process_open_fds"], before["process_open_fds"] + 1);
  EXPECT_GE(after["process_cpu_seconds_total"] - before["process_cpu_seconds_total"], 0.1);
  EXPECT_EQ(block[bytes - 1], 1);
}

}  // namespace
}  // namespace slimfit::base
