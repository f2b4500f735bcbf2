#include "planner/calibration.h"

#include <gtest/gtest.h>

#include "performer/matrix_products.h"

namespace slimfit::planner {
namespace {

CalibrationOptions Quick() {
  CalibrationOptions options;
  options.models = {ProbeModel(32), ProbeModel(64)};
  options.seq_len = 128;
  options.slices = {8, 32, 0};
  options.repeats = 1;
  return options;
}

TEST(CalibrationTest, ProducesAValidProfileFromTheProbes) {
  absl::StatusOr<CalibrationResult> result = Calibrate(Quick());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->profile.Validate().ok());
  EXPECT_EQ(result->probes.size(), 6u);
  EXPECT_EQ(result->profile.device, "cpu");
  EXPECT_GT(result->profile.total_memory_bytes, 0);
  EXPECT_GT(result->profile.flops_per_second, 0);
  for (const ProbeResult& probe : result->probes) {
    EXPECT_GT(probe.seconds, 0);
    EXPECT_GT(probe.working_bytes, 0);
  }
  // The CPU's BLAS keeps no tensors between calls: nothing resident beyond the probe model. (On a
  // CUDA card, cuBLAS's workspaces; the GPU runs in BENCHMARKS.md.)
  EXPECT_GE(result->profile.resident_overhead_bytes, 0);
  EXPECT_LT(result->profile.resident_overhead_bytes, int64_t{1} << 20);
  // What this build's engine does on the CPU (oneDNN products: the forward copies; none without).
  EXPECT_EQ(result->profile.forward_weight_copies, performer::OneDnnProducts());
}

TEST(CalibrationTest, BadOptionsAreErrors) {
  CalibrationOptions options = Quick();
  options.threads = 0;
  EXPECT_EQ(Calibrate(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = Quick();
  options.device = "tpu:7";
  EXPECT_EQ(Calibrate(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = Quick();
  options.models = {ProbeModel(32)};
  options.slices = {8, 0};
  EXPECT_EQ(Calibrate(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::planner
