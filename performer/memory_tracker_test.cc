#include "performer/memory_tracker.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace slimfit::performer {
namespace {

TEST(MemoryTrackerTest, CountsCurrentAndPeakTensorBytes) {
  ASSERT_TRUE(CpuTrackingActive());
  const at::Device cpu(at::kCPU);
  const int64_t before = GetMemoryStats(cpu)->current_bytes;
  MemoryScope scope(cpu);
  {
    at::Tensor a = at::ones({1024, 1024}, at::kFloat);  // 4 MiB
    at::Tensor b = at::matmul(a, a);                    // another 4 MiB
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
  EXPECT_FALSE(DeviceMemoryBytes(at::Device(at::kMeta)).ok());
}

TEST(MemoryTrackerTest, DeviceMemoryIsThePhysicalMemoryOrTheCards) {
  absl::StatusOr<int64_t> cpu = DeviceMemoryBytes(at::kCPU);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_GT(*cpu, int64_t{256} << 20);
  // Larger than anything this process holds.
  EXPECT_GT(*cpu, GetMemoryStats(at::kCPU)->current_bytes);
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: the card's memory is not checked";
  absl::StatusOr<int64_t> card = DeviceMemoryBytes(at::Device(at::kCUDA, 0));
  if (absl::IsUnimplemented(card.status()))
    GTEST_SKIP() << card.status();  // a build without the CUDA runtime
  ASSERT_TRUE(card.ok()) << card.status();
  EXPECT_GT(*card, int64_t{1} << 30);
}

}  // namespace
}  // namespace slimfit::performer
