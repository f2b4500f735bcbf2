// A real CUDA graph capture failure in the middle of a gradient call: the capture of a slice breaks
// after the slice's host code has run (ReplayableWork::FailCapturesForTesting with kInsideCapture: a
// host read inside the capture, which CUDA refuses), as any illegal call in a slice would. The call
// must stay exact — that slice and every later one run directly, the forward count is the host
// code's once, not twice — and CUDA graphs must stay off for the rest of the process (the caching
// allocator may still route into the broken capture's pool), which later calls report.
//
// Graphs go off for the whole process, so each path is its own binary: this file is built twice,
// with SLIMFIT_CAPTURE_FAILURE_BY_HAND 1 (slices by hand, explicit_backprop.h) and 0 (autograd).
// The CPU has no captures to fail (slice_replay_test covers the injected failure before the body
// there): every case skips without CUDA or without a build with CUDA graphs (scripts/cuda/).
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "performer/gradient_engine.h"
#include "performer/gradient_engine_test_cases.h"
#include "performer/replayable_work.h"

#ifndef SLIMFIT_CAPTURE_FAILURE_BY_HAND
#error "build with SLIMFIT_CAPTURE_FAILURE_BY_HAND defined to 1 (slices by hand) or 0 (autograd)"
#endif

namespace slimfit::performer {
namespace {

constexpr bool kByHand = SLIMFIT_CAPTURE_FAILURE_BY_HAND != 0;

GradientOptions Options(SliceReplay replay) {
  GradientOptions options;
  options.slice_replay = replay;
  options.explicit_backprop = kByHand;
  return options;
}

TEST(SliceCaptureFailureCudaTest, ACallWhoseCaptureBreaksStaysExactAndGraphsStayOffForTheProcess) {
  if (!at::hasCUDA() || !ReplayableWork::CudaGraphsBuilt()) {
    GTEST_SKIP() << "no CUDA device, or a build without CUDA graphs (scripts/cuda/): no capture to fail";
  }
  const at::Device cuda(at::kCUDA, 0);
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, cuda, 3);
  ASSERT_TRUE(model.ok()) << model.status();
  const ReplayCountCase c = MakeReplayCountCase(config.vocab);
  const GradientResult direct = MustCompute(*model, c.batch, c.plan, Options(SliceReplay::kOff));
  EXPECT_EQ(direct.explicit_backprop, kByHand);

  ReplayableWork::FailCapturesForTesting(1, ReplayableWork::InjectedFailure::kInsideCapture);
  const GradientResult broken = MustCompute(*model, c.batch, c.plan, Options(SliceReplay::kAuto));
  // The forward sweep's first advance warmed up, its second was the broken capture: nothing after
  // it replays, and its slice ran directly once the capture had failed.
  EXPECT_THAT(broken.replay_fallback, ::testing::Not(::testing::IsEmpty()));
  EXPECT_THAT(broken.replay_fallback, ::testing::Not(::testing::HasSubstr("FailCapturesForTesting")))
      << "the failure must be CUDA's, inside the capture";
  EXPECT_EQ(broken.replayed_slices, 0);
  EXPECT_EQ(broken.slice_forwards, ReplayCountCase::kSliceForwards);
  EXPECT_EQ(broken.explicit_backprop, kByHand);
  EXPECT_LE(RelativeDiscrepancy(broken.gradients, direct.gradients), 1e-12);
  EXPECT_NEAR(broken.loss_sum, direct.loss_sum, 1e-12 * direct.loss_sum);

  // Later calls do not capture again, say why, and stay exact.
  for (int call = 0; call < 2; ++call) {
    const GradientResult later = MustCompute(*model, c.batch, c.plan, Options(SliceReplay::kAuto));
    EXPECT_THAT(later.replay_fallback, ::testing::HasSubstr("CUDA graphs are off in this process"));
    EXPECT_THAT(later.replay_fallback, ::testing::HasSubstr(broken.replay_fallback));
    EXPECT_EQ(later.replayed_slices, 0);
    EXPECT_EQ(later.graph_pool_bytes, 0);
    EXPECT_EQ(later.slice_forwards, ReplayCountCase::kSliceForwards);
    EXPECT_LE(RelativeDiscrepancy(later.gradients, direct.gradients), 1e-12) << "call " << call;
  }
  // And the device's memory still serves a full-size call.
  Plan full;
  full.dtype = DType::kFloat64;
  const GradientResult full_gradient = MustCompute(*model, c.batch, full, Options(SliceReplay::kAuto));
  EXPECT_LE(RelativeDiscrepancy(full_gradient.gradients, direct.gradients), 1e-10);
}

}  // namespace
}  // namespace slimfit::performer
