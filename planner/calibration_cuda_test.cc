// On a CUDA device whose slices replay as CUDA graphs, calibration measures the graphs' memory pool
// and the planner's prediction holds it: for calls over the probe widths and beyond them (wider and
// deeper models, other lengths, every replayed C), the graphs' pool is at most the predicted one,
// and the call's peak stays within the budget a plan search would give it (the predicted peak at
// the default 10% safety margin). Skips (GTEST_SKIP) without a CUDA device or CUDA graphs, so the
// suite passes unchanged on CPU-only machines; scripts/cuda/ builds and runs it on a GPU machine.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/replayable_work.h"
#include "planner/calibration.h"
#include "planner/cost_model.h"

namespace slimfit::planner {
namespace {

using performer::ModelConfig;
using performer::Plan;

TEST(CalibrationCudaTest, PredictedPeaksHoldTheGraphsPool) {
  if (!at::hasCUDA())
    GTEST_SKIP() << "no CUDA device (this LibTorch has no CUDA support or no GPU is visible)";
  if (!performer::ReplayableWork::CudaGraphsBuilt()) GTEST_SKIP() << "this build has no CUDA graphs";
  CalibrationOptions options;
  options.device = "cuda:0";
  options.threads = 4;
  absl::StatusOr<CalibrationResult> calibrated = Calibrate(options);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  const DeviceProfile& profile = calibrated->profile;
  EXPECT_TRUE(profile.replays_slices);
  int pool_probes = 0;
  for (const ProbeResult& probe : calibrated->probes) {
    if (probe.pool_only && probe.graph_pool_bytes > 0) ++pool_probes;
  }
  EXPECT_EQ(pool_probes, 3 * 2) << "every probe model at C = 64 and 256 keeps a pool";
  std::printf(
      "profile: graph_pool_overhead_bytes %lld, activation_scale %.4f, resident_overhead_bytes %lld\n",
      static_cast<long long>(profile.graph_pool_overhead_bytes), profile.activation_scale,
      static_cast<long long>(profile.resident_overhead_bytes));

  struct Case {
    int64_t d_model, layers, heads, seq_len, slice;
  };
  const at::Device cuda(at::kCUDA, 0);
  for (const Case& c :
       {Case{256, 2, 4, 4096, 16}, Case{256, 2, 4, 4096, 64}, Case{256, 2, 4, 4096, 128},
        Case{256, 2, 4, 4096, 256}, Case{512, 2, 4, 2048, 128}, Case{512, 2, 4, 4096, 256},
        Case{768, 6, 12, 2048, 128}, Case{1024, 4, 8, 4096, 64}, Case{1024, 4, 8, 4096, 256}}) {
    ModelConfig config = ProbeModel(c.d_model);
    config.layers = c.layers;
    config.heads = c.heads;
    const std::string what =
        absl::StrCat("d_model ", c.d_model, ", ", c.layers, " layers, L = ", c.seq_len, ", C = ", c.slice);
    absl::StatusOr<performer::PerformerModel> model =
        performer::PerformerModel::Create(config, performer::DType::kFloat32, cuda, 1);
    ASSERT_TRUE(model.ok()) << model.status();
    performer::PackedBatch batch;
    std::mt19937_64 generator(7);
    for (int64_t i = 0; i < c.seq_len; ++i)
      batch.tokens.push_back(static_cast<int64_t>(generator() % config.vocab));
    Plan plan;
    plan.slice = c.slice;
    // The first call of a model warms LibTorch up, as a worker's first shard; its gradients are
    // dropped before the second, whose peak is the device's.
    absl::StatusOr<performer::GradientResult> result = performer::ComputeGradient(*model, batch, plan, {});
    ASSERT_TRUE(result.ok()) << result.status() << " (" << what << ")";
    result = absl::UnknownError("dropped");
    result = performer::ComputeGradient(*model, batch, plan, {});
    ASSERT_TRUE(result.ok()) << result.status() << " (" << what << ")";
    EXPECT_GT(result->replayed_slices, 0) << what;
    absl::StatusOr<Prediction> predicted = Predict(Workload{config, c.seq_len}, plan, profile);
    ASSERT_TRUE(predicted.ok()) << predicted.status();
    std::printf("%s: pool %.1f MiB of %.1f predicted; peak %.1f MiB of %.1f predicted\n", what.c_str(),
                static_cast<double>(result->graph_pool_bytes) / (1 << 20),
                static_cast<double>(predicted->graph_pool_bytes) / (1 << 20),
                static_cast<double>(result->peak_bytes) / (1 << 20),
                static_cast<double>(predicted->peak_bytes) / (1 << 20));
    EXPECT_GT(result->graph_pool_bytes, 0) << what;
    EXPECT_LE(result->graph_pool_bytes, predicted->graph_pool_bytes) << what;
    EXPECT_LE(static_cast<double>(result->peak_bytes), static_cast<double>(predicted->peak_bytes) / 0.9)
        << what;
  }
}

}  // namespace
}  // namespace slimfit::planner
