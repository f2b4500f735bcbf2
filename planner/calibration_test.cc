#include "planner/calibration.h"

#include <cstdint>

#include <gtest/gtest.h>

#include "performer/gradient_engine.h"
#include "performer/matrix_products.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "planner/cost_model.h"

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
  // A CPU replays no slice as a CUDA graph: no pool, no pool probes.
  EXPECT_FALSE(result->profile.replays_slices);
  EXPECT_EQ(result->profile.graph_pool_overhead_bytes, 0);
  for (const ProbeResult& probe : result->probes) {
    EXPECT_EQ(probe.graph_pool_bytes, 0);
    EXPECT_FALSE(probe.pool_only);
    EXPECT_EQ(probe.seq_len, 128);
  }
  // bfloat16 products were timed against float32 (a measured ratio, not the unmeasured 1).
  EXPECT_GT(result->profile.bf16_time_ratio, 0);
  EXPECT_NE(result->profile.bf16_time_ratio, 1.0);
}

// A float64 profile has no bfloat16 products to time (they round float32 values): the ratio stays 1.
TEST(CalibrationTest, Float64ProfilesLeaveTheBf16RatioUnmeasured) {
  CalibrationOptions options = Quick();
  options.dtype = performer::DType::kFloat64;
  options.models = {ProbeModel(32)};
  absl::StatusOr<CalibrationResult> result = Calibrate(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->profile.bf16_time_ratio, 1.0);
}

TEST(CalibrationTest, TheGraphPoolOverheadIsTheMostAPoolExceededItsScratch) {
  EXPECT_EQ(GraphPoolOverheadBytes({}), 0);
  EXPECT_EQ(GraphPoolOverheadBytes({{10, 4}}), 0);  // a pool under its scratch needs none
  EXPECT_EQ(GraphPoolOverheadBytes({{1, 5}, {3, 9}, {5, 8}}), 6);
  // Pools measured on an H100 (BENCHMARKS.md, "The graphs' pool in the plan"): the 20 MiB segment
  // of the caching allocator shows where blocks of 1–10 MiB first appear.
  constexpr int64_t kMiB = 1 << 20;
  EXPECT_EQ(GraphPoolOverheadBytes({{2 * kMiB, 4 * kMiB}, {12 * kMiB, 28 * kMiB}, {47 * kMiB, 58 * kMiB}}),
            16 * kMiB);
}

// The engine's batched weight-gradient buffers are what the cost model counts, for the plans it
// counts them for, and absent from the others.
TEST(CalibrationTest, TheCostModelCountsTheBatchedWeightGradientBuffersTheEngineAllocates) {
  struct Case {
    bool batched;
    int64_t slice;
    performer::FeatureMap features = performer::FeatureMap::kSqr;
    performer::LayerRecompute recompute = performer::LayerRecompute::kNone;
    performer::DType dtype = performer::DType::kFloat32;
    bool bf16_products = false;
  };
  using performer::FeatureMap;
  using performer::LayerRecompute;
  for (const Case& c : {Case{true, 16}, Case{true, 24},
                        Case{true, 16, FeatureMap::kSqr, LayerRecompute::kNone, performer::DType::kFloat64},
                        Case{false, 0}, Case{false, 64}, Case{true, 16, FeatureMap::kFavor},
                        Case{false, 16, FeatureMap::kSqr, LayerRecompute::kLayers},
                        Case{false, 16, FeatureMap::kSqr, LayerRecompute::kNone, performer::DType::kFloat32, true}}) {
    performer::ModelConfig config = ProbeModel(32);
    config.feature_map = c.features;
    absl::StatusOr<performer::PerformerModel> model =
        performer::PerformerModel::Create(config, c.dtype, at::Device(at::kCPU), 1);
    ASSERT_TRUE(model.ok()) << model.status();
    performer::PackedBatch batch;
    for (int64_t i = 0; i < 160; ++i) batch.tokens.push_back((i * 7 + i / 9) % config.vocab);
    performer::Plan plan;
    plan.slice = c.slice;
    plan.recompute = c.recompute;
    plan.dtype = c.dtype;
    plan.bf16_products = c.bf16_products;
    absl::StatusOr<performer::GradientResult> result = performer::ComputeGradient(*model, batch, plan, {});
    ASSERT_TRUE(result.ok()) << result.status();
    const std::string what = plan.DebugString();
    EXPECT_EQ(result->batched_weight_gradient_bytes, BatchedWeightGradientBytes(config, plan, DeviceProfile()))
        << what;
    EXPECT_EQ(result->batched_weight_gradient_bytes > 0, c.batched) << what;
  }
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
