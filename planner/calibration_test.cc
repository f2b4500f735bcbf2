#include "planner/calibration.h"

#include <gtest/gtest.h>

#include <cstdint>

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
  const CalibrationOptions options = Quick();
  absl::StatusOr<CalibrationResult> result = Calibrate(options);
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
  // Less than a gradient of the smallest probe model: no call's result is alive when the next call
  // starts (the bfloat16 calls follow the float32 ones on each probe).
  absl::StatusOr<performer::PerformerModel> smallest =
      performer::PerformerModel::Create(options.models.front(), performer::DType::kFloat32, at::kCPU, 1);
  ASSERT_TRUE(smallest.ok());
  EXPECT_LT(result->profile.resident_overhead_bytes, smallest->parameter_bytes());
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
  // bfloat16 products were timed against float32 on every probe (a measured ratio, not the
  // unmeasured 1) and fitted into their constants.
  EXPECT_GT(result->bf16_call_time_ratio, 0);
  EXPECT_NE(result->bf16_call_time_ratio, 1.0);
  EXPECT_GT(result->profile.bf16_flops_per_second, 0);
  EXPECT_LE(result->profile.bf16_flops_per_second,
            kMaxBf16RateGain * result->profile.flops_per_second * (1 + 1e-12));
  EXPECT_GE(result->profile.bf16_half_rate_rows, 0);
  EXPECT_GE(result->profile.bf16_layer_overhead_s, 0);
}

// A float64 profile has no bfloat16 products to time (they round float32 values): unmeasured.
TEST(CalibrationTest, Float64ProfilesLeaveTheBf16ConstantsUnmeasured) {
  CalibrationOptions options = Quick();
  options.dtype = performer::DType::kFloat64;
  options.models = {ProbeModel(32)};
  absl::StatusOr<CalibrationResult> result = Calibrate(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->profile.bf16_flops_per_second, 0);
  EXPECT_EQ(result->bf16_call_time_ratio, 1.0);
}

TEST(CalibrationTest, WarningsSayWhatIsLeftUnmeasured) {
  CalibrationResult result;
  EXPECT_TRUE(result.Warnings().empty());
  result.bf16_error = "no kernel";
  result.bf16_fit_error = "collinear";
  const std::vector<std::string> warnings = result.Warnings();
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0],
            "this device cannot run bfloat16 products (jobs with them will fail on it): no kernel");
  EXPECT_EQ(warnings[1], "bfloat16 plans are predicted with the float32 constants: collinear");
}

// Probes timed as a device with known bfloat16 constants would run them (the float32 fit off by
// a probe-dependent error, which the differences cancel): the fit recovers the constants.
TEST(CalibrationTest, Bf16ConstantsAreRecoveredFromTheDifferences) {
  DeviceProfile float32;
  float32.flops_per_second = 2e11;
  float32.half_rate_rows = 20;
  float32.layer_overhead_s = 5e-5;
  const double rate = 3e11, half_rate_rows = 90, overhead = 8e-5;  // faster, larger size penalty
  std::vector<Bf16Probe> probes;
  const double errors[] = {0.3, -0.1, 0.05, 0.2, -0.25, 0.0};  // what the float32 fit misses
  for (int i = 0; i < 6; ++i) {
    Bf16Probe probe;
    probe.linear_flops = 1e9 * (1 + i * i);
    probe.linear_size_weighted_flops = probe.linear_flops * (0.4 / (1 + 3 * i) + 0.01 * i);
    probe.layer_computations = 10.0 * (7 - i);
    const double other = 0.01 + errors[i] * 0.005;  // prefix sums, element-wise work, misfit
    probe.float32_seconds = probe.linear_flops / 2e11 + 20 * probe.linear_size_weighted_flops / 2e11 +
                            5e-5 * probe.layer_computations + other;
    probe.bf16_seconds = probe.linear_flops / rate +
                         half_rate_rows * probe.linear_size_weighted_flops / rate +
                         overhead * probe.layer_computations + other;
    probes.push_back(probe);
  }
  DeviceProfile fitted = float32;
  ASSERT_TRUE(FitBf16Products(probes, &fitted).ok());
  EXPECT_NEAR(fitted.bf16_flops_per_second, rate, 1e-6 * rate);
  EXPECT_NEAR(fitted.bf16_half_rate_rows, half_rate_rows, 1e-6 * half_rate_rows);
  EXPECT_NEAR(fitted.bf16_layer_overhead_s, overhead, 1e-6 * overhead);
  EXPECT_EQ(fitted.flops_per_second, float32.flops_per_second);  // the float32 constants stay

  // Bounds: products that the differences call free are held to kMaxBf16RateGain × float32's rate,
  // and a negative size penalty or overhead to 0.
  std::vector<Bf16Probe> faster = probes;
  for (Bf16Probe& probe : faster) probe.bf16_seconds = 0.01 * probe.float32_seconds;
  fitted = float32;
  ASSERT_TRUE(FitBf16Products(faster, &fitted).ok());
  EXPECT_DOUBLE_EQ(fitted.bf16_flops_per_second, kMaxBf16RateGain * float32.flops_per_second);
  EXPECT_GE(fitted.bf16_half_rate_rows, 0);
  EXPECT_GE(fitted.bf16_layer_overhead_s, 0);

  // Too few probes to tell three constants apart.
  probes.resize(2);
  const absl::Status status = FitBf16Products(probes, &fitted);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.message()).find("three probes"), std::string::npos) << status;
}

TEST(CalibrationTest, TheGraphPoolOverheadIsTheMostAPoolExceededItsScratch) {
  EXPECT_EQ(GraphPoolOverheadBytes({}), 0);
  EXPECT_EQ(GraphPoolOverheadBytes({{10, 4}}), 0);  // a pool under its scratch needs none
  EXPECT_EQ(GraphPoolOverheadBytes({{1, 5}, {3, 9}, {5, 8}}), 6);
  // Pools measured on an H100 (BENCHMARKS.md, "What do CUDA graphs buy, and what does their pool cost?"): the
  // 20 MiB segment
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
  for (const Case& c :
       {Case{true, 16}, Case{true, 24},
        Case{true, 16, FeatureMap::kSqr, LayerRecompute::kNone, performer::DType::kFloat64}, Case{false, 0},
        Case{false, 64}, Case{true, 16, FeatureMap::kFavor},
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
    EXPECT_EQ(result->batched_weight_gradient_bytes,
              BatchedWeightGradientBytes(config, plan, DeviceProfile()))
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
