#include "performer/memory_tracker.h"

#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace slimfit::performer {
namespace {

TEST(MemoryTrackerTest, CountsCurrentAndPeakTensorBytes) {
  ASSERT_TRUE(CpuTrackingActive());
  const at::Device cpu(at::kCPU);
  const int64_t before = GetMemoryStats(cpu)->current_bytes;
  MemoryScope scope(cpu);
  {
    at::Tensor a = at::ones({1024, 1024}, at::kFloat);  // 4 MiB
    at::Tensor b = at::matmul(a, a);                     // another 4 MiB
    EXPECT_GE(GetMemoryStats(cpu)->current_bytes - before, 8 << 20);
  }
  EXPECT_EQ(GetMemoryStats(cpu)->current_bytes, before);
  EXPECT_GE(*scope.PeakBytes() - before, 8 << 20);
  ASSERT_TRUE(ResetPeakMemory(cpu).ok());
  EXPECT_EQ(GetMemoryStats(cpu)->peak_bytes, before);
}

TEST(MemoryTrackerTest, ConcurrentAllocationsBalance) {
  const at::Device cpu(at::kCPU);
  const int64_t before = GetMemoryStats(cpu)->current_bytes;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 200; ++i) at::Tensor x = at::empty({1000 + i}, at::kDouble);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(GetMemoryStats(cpu)->current_bytes, before);
}

TEST(MemoryTrackerTest, UnsupportedDevicesAreErrors) {
  EXPECT_FALSE(GetMemoryStats(at::Device(at::kMeta)).ok());
}

}  // namespace
}  // namespace slimfit::performer
