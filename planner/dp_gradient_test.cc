// The engine running the optimal checkpoint schedules of Gruslys et al. (bptt_schedule.h): exactly
// the forwards the program predicts, and the full back-propagation gradient.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "performer/gradient_engine.h"
#include "performer/performer_model.h"
#include "planner/bptt_schedule.h"

namespace slimfit::planner {
namespace {

using performer::DType;
using performer::FrontPolicy;
using performer::GradientOptions;
using performer::GradientResult;
using performer::LayerRecompute;
using performer::PackedBatch;
using performer::PerformerModel;
using performer::Plan;

performer::ModelConfig SmallConfig() {
  performer::ModelConfig config;
  config.vocab = 37;
  config.d_model = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 24;
  config.feature_map = performer::FeatureMap::kRelu;
  config.layernorm = performer::LayerNormPlacement::kPre;
  return config;
}

// 40 tokens in five documents, one of a single token; boundaries fall inside slices for most C.
PackedBatch PackedStream(int64_t vocab) {
  PackedBatch batch;
  for (int64_t i = 0; i < 40; ++i) batch.tokens.push_back((i * 7 + 3 * (i / 5)) % vocab);
  batch.doc_starts = {0, 11, 12, 20, 30};
  return batch;
}

GradientResult MustCompute(const PerformerModel& model, const PackedBatch& batch, const Plan& plan) {
  GradientOptions options;
  options.dp_schedule = ScheduleForPlan;
  absl::StatusOr<GradientResult> result = performer::ComputeGradient(model, batch, plan, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : GradientResult{};
}

Plan DpPlan(ScheduleKind kind, int64_t slice, int64_t slots, double alpha = 0, double beta = 0) {
  Plan plan;
  plan.slice = slice;
  plan.dtype = DType::kFloat64;
  plan.front_policy = FrontPolicy::kDp;
  plan.schedule = kind;
  plan.slots = slots;
  plan.alpha = alpha;
  plan.beta = beta;
  return plan;
}

TEST(DpGradientTest, RunsExactlyTheProgramsForwardsAndGivesTheFullGradient) {
  const performer::ModelConfig config = SmallConfig();
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 3);
  ASSERT_TRUE(model.ok());
  const PackedBatch batch = PackedStream(config.vocab);
  Plan full;
  full.dtype = DType::kFloat64;
  const GradientResult reference = MustCompute(*model, batch, full);
  for (const Plan& plan :
       {DpPlan(ScheduleKind::kHsm, 3, 1), DpPlan(ScheduleKind::kHsm, 2, 3), DpPlan(ScheduleKind::kHsm, 1, 40),
        DpPlan(ScheduleKind::kIsm, 3, 2), DpPlan(ScheduleKind::kIsm, 4, 10),
        DpPlan(ScheduleKind::kMsm, 3, 6, 3, 2), DpPlan(ScheduleKind::kMsm, 5, 4, 2.5, 1.5)}) {
    const GradientResult result = MustCompute(*model, batch, plan);
    const int64_t slices = (batch.size() + plan.slice - 1) / plan.slice;
    absl::StatusOr<int64_t> predicted = OptimalCost(plan.schedule, slices, plan.slots, plan.alpha, plan.beta);
    ASSERT_TRUE(predicted.ok()) << predicted.status();
    EXPECT_EQ(result.slice_forwards, *predicted) << plan.DebugString();
    EXPECT_LE(performer::RelativeDiscrepancy(result.gradients, reference.gradients), 1e-10)
        << plan.DebugString();
    EXPECT_NEAR(result.loss_sum, reference.loss_sum, 1e-10 * reference.loss_sum);
  }
  // One slot for 14 slices under HSM costs t(t+1)/2 forwards (Gruslys et al.).
  EXPECT_EQ(MustCompute(*model, batch, DpPlan(ScheduleKind::kHsm, 3, 1)).slice_forwards, 14 * 15 / 2);
}

TEST(DpGradientTest, LayerRecomputationUnderAScheduleGivesTheFullGradient) {
  const performer::ModelConfig config = SmallConfig();
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 13);
  ASSERT_TRUE(model.ok());
  const PackedBatch batch = PackedStream(config.vocab);
  Plan full;
  full.dtype = DType::kFloat64;
  const GradientResult reference = MustCompute(*model, batch, full);
  for (int64_t slice : {int64_t{1}, int64_t{7}, int64_t{40}}) {
    Plan plan = DpPlan(ScheduleKind::kIsm, slice, 2);
    plan.recompute = LayerRecompute::kLayers;
    plan.block = 3;
    const GradientResult result = MustCompute(*model, batch, plan);
    EXPECT_LE(performer::RelativeDiscrepancy(result.gradients, reference.gradients), 1e-10)
        << plan.DebugString();
    EXPECT_NEAR(result.loss_sum, reference.loss_sum, 1e-10 * reference.loss_sum) << plan.DebugString();
  }
}

TEST(DpGradientTest, ScheduleForPlanRefusesOtherPolicies) {
  Plan plan;
  plan.slice = 4;
  EXPECT_EQ(ScheduleForPlan(plan, 10).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::planner
