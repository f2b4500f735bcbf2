#include "bench/process_usage.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::bench {
namespace {

using ::testing::HasSubstr;

// /proc/PID/stat of a process named "a) (b": utime 250 and stime 50 ticks, 7 threads.
constexpr char kStat[] =
    "4242 (a) (b) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 7 0 100 123456789 2000 "
    "18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";
constexpr char kStatus[] =
    "Name:\ta) (b\nState:\tS (sleeping)\nVmPeak:\t  900000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 "
    "kB\nThreads:\t7\n";

TEST(ProcessUsageTest, ParsesCpuTimeMemoryAndThreads) {
  absl::StatusOr<ProcessUsage> usage = ParseProcessUsage(kStat, kStatus, 100);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ(usage->cpu_seconds, 3.0);
  EXPECT_EQ(usage->rss_bytes, 1024 * 1024);
  EXPECT_EQ(usage->peak_rss_bytes, 2048 * 1024);
  EXPECT_EQ(usage->threads, 7);
}

TEST(ProcessUsageTest, MalformedTextIsInvalidArgumentSayingWhat) {
  EXPECT_EQ(ParseProcessUsage("4242 (x) S 1 2", kStatus, 100).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status no_peak = ParseProcessUsage(kStat, "VmRSS:\t 1 kB\n", 100).status();
  EXPECT_EQ(no_peak.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_peak.message(), HasSubstr("VmHWM"));
  EXPECT_THAT(ParseProcessUsage(kStat, "VmRSS:\t lots\nVmHWM:\t 1 kB\n", 100).status().message(),
              HasSubstr("VmRSS"));
}

TEST(ProcessUsageTest, ReadsThisProcessAndNotAMissingOne) {
  absl::StatusOr<ProcessUsage> self = ReadProcessUsage(0);
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_GT(self->rss_bytes, 0);
  EXPECT_GE(self->peak_rss_bytes, self->rss_bytes);
  EXPECT_GE(self->threads, 1);
  EXPECT_GE(self->cpu_seconds, 0);
  EXPECT_EQ(ReadProcessUsage(2147483647).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace slimfit::bench
