// Replayed slices (GradientOptions::slice_replay) give the op-by-op gradient. On the CPU the replay
// path runs without capture (SliceReplay::kRerun): the same static buffers refilled before every
// slice, the same bodies, the same bookkeeping — so a stale buffer, or a front or gradient taken
// from the wrong slice, shows here as a different gradient. What only a
// capture can get wrong — a host value baked in at capture, a result written out of place, host
// code a replay skips — does not show here (kRerun runs the host code every time): that is checked
// on a GPU, by replayable_work_test and gradient_engine_cuda_test (CUDA graphs = CPU = op by op),
// which skip in CI.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine.h"
#include "performer/gradient_engine_test_cases.h"
#include "performer/replayable_work.h"

namespace slimfit::performer {
namespace {

// Slices by hand (explicit_backprop.h) where that path serves the call, as on a GPU, or through
// autograd (`by_hand` false: layer recomputation takes it anyway).
GradientOptions Replay(SliceReplay replay, bool by_hand = true) {
  GradientOptions options;
  options.feature_seed = 4;
  options.slice_replay = replay;
  options.explicit_backprop = by_hand;
  return options;
}

void ExpectSameResult(const GradientResult& replayed, const GradientResult& direct, const std::string& what) {
  EXPECT_LE(RelativeDiscrepancy(replayed.gradients, direct.gradients), 1e-12) << what;
  EXPECT_NEAR(replayed.loss_sum, direct.loss_sum, 1e-12 * direct.loss_sum) << what;
  EXPECT_EQ(replayed.slice_forwards, direct.slice_forwards) << what;
  EXPECT_GT(replayed.replayed_slices, 0) << what;
  EXPECT_EQ(direct.replayed_slices, 0) << what;
  EXPECT_EQ(replayed.replay_fallback, "") << what;
  EXPECT_EQ(replayed.graph_pool_bytes, 0) << what << ": no capture, no pool";
}

TEST(SliceReplayTest, EveryPolicyAndRecomputationGivesTheOpByOpGradient) {
  for (FeatureMap map : {FeatureMap::kRelu, FeatureMap::kSqr, FeatureMap::kFavor}) {
    const ModelConfig config = SmallEngineConfig(map);
    const PerformerModel model = MustCreateModel(config, DType::kFloat64, 6);
    const PackedBatch batch = FiveDocumentStream(config.vocab);
    for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore, FrontPolicy::kResync}) {
      for (LayerRecompute recompute : {LayerRecompute::kNone, LayerRecompute::kLayers}) {
        for (int64_t slice : {1, 4, 7}) {
          for (bool by_hand : {true, false}) {
            Plan plan;
            plan.dtype = DType::kFloat64;
            plan.slice = slice;
            plan.front_policy = policy;
            plan.resync_every = 3;
            plan.recompute = recompute;
            const std::string what = absl::StrCat(FeatureMapName(map), " ", plan.DebugString(),
                                                  by_hand ? ", by hand" : ", autograd");
            const GradientResult direct = MustCompute(model, batch, plan, Replay(SliceReplay::kOff, by_hand));
            const GradientResult replayed =
                MustCompute(model, batch, plan, Replay(SliceReplay::kRerun, by_hand));
            ExpectSameResult(replayed, direct, what);
            EXPECT_EQ(replayed.explicit_backprop, by_hand && recompute == LayerRecompute::kNone) << what;
          }
        }
      }
    }
  }
}

TEST(SliceReplayTest, DpSchedulesReplayTheirForwardsAndSteps) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kElu1);
  const PerformerModel model = MustCreateModel(config, DType::kFloat64, 8);
  const PackedBatch batch = FiveDocumentStream(config.vocab);
  Plan plan;
  plan.dtype = DType::kFloat64;
  plan.slice = 6;
  plan.front_policy = FrontPolicy::kDp;
  plan.schedule = ScheduleKind::kHsm;
  plan.slots = 20;
  GradientOptions direct_options = Replay(SliceReplay::kOff);
  GradientOptions replay_options = Replay(SliceReplay::kRerun);
  direct_options.dp_schedule =
      replay_options.dp_schedule = [](const Plan&, int64_t slices) { return KeepEveryFront(slices); };
  const GradientResult direct = MustCompute(model, batch, plan, direct_options);
  const GradientResult replayed = MustCompute(model, batch, plan, replay_options);
  ExpectSameResult(replayed, direct, plan.DebugString());
  Plan full_plan;
  full_plan.dtype = DType::kFloat64;
  const GradientResult full = MustCompute(model, batch, full_plan);
  EXPECT_LE(RelativeDiscrepancy(replayed.gradients, full.gradients), 1e-10);
}

TEST(SliceReplayTest, Float32ReplaysGiveTheOpByOpGradient) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr);
  const PerformerModel model = MustCreateModel(config, DType::kFloat32, 2);
  Plan plan;
  plan.slice = 8;
  const PackedBatch batch = FiveDocumentStream(config.vocab);
  const GradientResult direct = MustCompute(model, batch, plan, Replay(SliceReplay::kOff));
  const GradientResult replayed = MustCompute(model, batch, plan, Replay(SliceReplay::kRerun));
  EXPECT_LE(RelativeDiscrepancy(replayed.gradients, direct.gradients), 1e-6);
  EXPECT_GT(replayed.replayed_slices, 0);
}

// What is replayed: every slice but the last and those with a document start (the backward step),
// and the forward sweep's stretches that continue their front; kAuto on the CPU replays nothing.
TEST(SliceReplayTest, ReplaysExactlyTheSlicesWithoutDocumentStarts) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr);
  const PerformerModel model = MustCreateModel(config, DType::kFloat64, 1);
  const ReplayCountCase c = MakeReplayCountCase(config.vocab);
  const GradientResult replayed = MustCompute(model, c.batch, c.plan, Replay(SliceReplay::kRerun));
  // Forward sweep: slices 0..6 (slice 0 starts the document: direct; 1..6 advance, the first of
  // them a warm-up). Backward: slices 7 (no G(n) yet) and 0 direct; 6..1 step, the first a warm-up.
  EXPECT_EQ(replayed.slice_forwards, ReplayCountCase::kSliceForwards);
  EXPECT_EQ(replayed.replayed_slices, ReplayCountCase::kReplayed);
  const GradientResult automatic = MustCompute(model, c.batch, c.plan, Replay(SliceReplay::kAuto));
  EXPECT_EQ(automatic.replayed_slices, 0);
  EXPECT_LE(RelativeDiscrepancy(replayed.gradients, automatic.gradients), 1e-12);
}

// A capture that fails (here on purpose, ReplayableWork::FailCapturesForTesting) leaves the call
// exact: that slice runs directly, every later one too, the forward count stays right, and the
// result says why. In kRerun mode the next call replays again (only a failed CUDA capture turns
// graphs off for the process). The injected failure throws before the body runs; a real capture
// fails partway through it, after its host code has counted forwards — that restore, and the
// process-wide switch-off, only a GPU can exercise.
TEST(SliceReplayTest, AFailedCaptureFallsBackToDirectSlicesForTheRestOfTheCall) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr);
  const PerformerModel model = MustCreateModel(config, DType::kFloat64, 1);
  const ReplayCountCase c = MakeReplayCountCase(config.vocab);
  const GradientResult direct = MustCompute(model, c.batch, c.plan, Replay(SliceReplay::kOff));
  ReplayableWork::FailCapturesForTesting(1);
  const GradientResult fallen = MustCompute(model, c.batch, c.plan, Replay(SliceReplay::kRerun));
  EXPECT_THAT(fallen.replay_fallback, ::testing::HasSubstr("capture failed on purpose"));
  // The forward sweep's first advance warmed up, its second was the failed capture: nothing after
  // it replays.
  EXPECT_EQ(fallen.replayed_slices, 0);
  EXPECT_EQ(fallen.slice_forwards, ReplayCountCase::kSliceForwards);
  EXPECT_LE(RelativeDiscrepancy(fallen.gradients, direct.gradients), 1e-12);
  EXPECT_DOUBLE_EQ(fallen.loss_sum, direct.loss_sum);
  const GradientResult again = MustCompute(model, c.batch, c.plan, Replay(SliceReplay::kRerun));
  EXPECT_TRUE(again.replay_fallback.empty()) << again.replay_fallback;
  EXPECT_EQ(again.replayed_slices, ReplayCountCase::kReplayed);
}

}  // namespace
}  // namespace slimfit::performer
