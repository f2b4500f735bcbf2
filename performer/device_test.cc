#include "performer/device.h"

#include <ATen/Context.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace slimfit::performer {
namespace {

using ::testing::HasSubstr;

TEST(ParseDevice, CpuAndCudaByIndex) {
  absl::StatusOr<c10::Device> cpu = ParseDevice("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(cpu->is_cpu());
  absl::StatusOr<c10::Device> cuda = ParseDevice("cuda:0");
  if (at::hasCUDA()) {
    ASSERT_TRUE(cuda.ok());
    EXPECT_EQ(cuda->index(), 0);
  } else {
    EXPECT_THAT(cuda.status().message(),
                HasSubstr("--device=cuda:0: this build of LibTorch has no CUDA support"));
  }
}

TEST(ParseDevice, AnythingElseIsRefusedNamingTheFlag) {
  for (const char* name : {"", "gpu", "cuda", "CPU", "cpu:0", "cuda:x"}) {
    absl::StatusOr<c10::Device> device = ParseDevice(name, "target");
    EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(device.status().message(), HasSubstr("--target=")) << name;
  }
}

}  // namespace
}  // namespace slimfit::performer
