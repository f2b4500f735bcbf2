#include "planner/plan_proto.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace slimfit::planner {
namespace {

using performer::ScheduleKind;
using ::testing::HasSubstr;

DeviceProfile Profile() {
  DeviceProfile p;
  p.flops_per_second = 3e11;
  p.half_rate_rows = 50;
  p.seconds_per_element = 1e-9;
  p.layer_overhead_s = 2e-4;
  return p;
}

TEST(PlanProtoTest, ModelConfigRoundTripsAndAbsentFieldsTakeDefaults) {
  performer::ModelConfig config;
  config.d_model = 64;
  config.layers = 3;
  config.heads = 2;
  config.d_ff = 96;
  config.feature_map = performer::FeatureMap::kFavor;
  config.feature_multiplier = 2;
  config.layernorm = performer::LayerNormPlacement::kPre;
  absl::StatusOr<performer::ModelConfig> back = ModelConfigFromProto(ModelConfigToProto(config), "m");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->DebugString(), config.DebugString());

  absl::StatusOr<performer::ModelConfig> defaults = ModelConfigFromProto(v1::ModelConfig(), "m");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->DebugString(), performer::ModelConfig().DebugString());
}

TEST(PlanProtoTest, ModelConfigErrorsNameTheField) {
  v1::ModelConfig proto;
  proto.set_d_model(30);
  proto.set_heads(4);
  absl::Status status = ModelConfigFromProto(proto, "spec.model.config").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("spec.model.config"));

  v1::ModelConfig unspecified;
  unspecified.set_feature_map(v1::FEATURE_MAP_UNSPECIFIED);
  status = ModelConfigFromProto(unspecified, "spec.model.config").status();
  EXPECT_THAT(status.message(), HasSubstr("spec.model.config.feature_map"));
}

TEST(PlanProtoTest, EveryPolicyRoundTrips) {
  for (performer::FrontPolicy policy : {performer::FrontPolicy::kReverse, performer::FrontPolicy::kStore,
                                        performer::FrontPolicy::kResync, performer::FrontPolicy::kDp}) {
    performer::Plan plan;
    plan.slice = 128;
    plan.prefix_mode = performer::PrefixMode::kChunked;
    plan.block = 32;
    plan.front_policy = policy;
    if (policy == performer::FrontPolicy::kResync) plan.resync_every = 8;
    if (policy == performer::FrontPolicy::kDp) {
      plan.schedule = ScheduleKind::kMsm;
      plan.slots = 5;
      plan.alpha = 3.5;
      plan.beta = 2.5;
    }
    plan.recompute = performer::LayerRecompute::kLayers;
    plan.dtype = performer::DType::kFloat64;
    plan.threads = 2;
    plan.predicted_peak_bytes = 12345;
    plan.predicted_time_s = 0.25;
    plan.reason = "why";
    absl::StatusOr<performer::Plan> back = PlanFromProto(PlanToProto(plan), "plan");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->DebugString(), plan.DebugString());
    EXPECT_EQ(back->predicted_peak_bytes, 12345);
    EXPECT_EQ(back->reason, "why");
  }
  // copy_forward_weights: absent reads as true; false survives the trip.
  performer::Plan one;
  one.copy_forward_weights = false;
  EXPECT_FALSE(PlanFromProto(PlanToProto(one), "plan")->copy_forward_weights);
  v1::Plan absent;
  absent.set_dtype(v1::DTYPE_FLOAT32);
  EXPECT_TRUE(PlanFromProto(absent, "plan")->copy_forward_weights);
  EXPECT_FALSE(PlanToProto(performer::Plan()).has_copy_forward_weights());
}

TEST(PlanProtoTest, Bf16ProductsSurviveTheTripAndNeedFloat32) {
  performer::Plan mixed;
  mixed.slice = 64;
  mixed.bf16_products = true;
  absl::StatusOr<performer::Plan> back = PlanFromProto(PlanToProto(mixed), "plan");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->bf16_products);
  EXPECT_FALSE(PlanFromProto(PlanToProto(performer::Plan()), "plan")->bf16_products);
  EXPECT_THAT(PlanSummary(mixed), HasSubstr("bfloat16 products"));
  v1::Plan wide = PlanToProto(mixed);
  wide.set_dtype(v1::DTYPE_FLOAT64);
  EXPECT_THAT(PlanFromProto(wide, "plan").status().message(),
              HasSubstr("plan.bf16_products: bfloat16 products need dtype float32"));
}

TEST(PlanProtoTest, SlicedPlanNeedsItsEnums) {
  v1::Plan proto;
  proto.set_slice(64);
  proto.set_dtype(v1::DTYPE_FLOAT32);
  EXPECT_THAT(PlanFromProto(proto, "plan").status().message(), HasSubstr("plan.prefix_mode"));
  proto.set_prefix_mode(v1::PREFIX_MODE_CHUNKED);
  EXPECT_THAT(PlanFromProto(proto, "plan").status().message(), HasSubstr("plan.front_policy"));
  proto.set_front_policy(v1::FRONT_POLICY_DP);
  EXPECT_THAT(PlanFromProto(proto, "plan").status().message(), HasSubstr("plan.schedule"));
  proto.set_front_policy(v1::FRONT_POLICY_REVERSE);
  proto.set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_THAT(PlanFromProto(proto, "plan").status().message(), HasSubstr("plan.dtype"));
}

TEST(PlanProtoTest, SearchMemoryPlanAnswersWithAPlanOrARefusal) {
  PlanSearchRequest request;
  request.workload.model.d_model = 256;
  request.workload.seq_len = 4096;
  request.memory_budget_bytes = int64_t{64} << 20;
  absl::StatusOr<v1::MemoryPlan> plan = SearchMemoryPlan(request, Profile(), /*include_frontier=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->has_chosen());
  EXPECT_FALSE(plan->has_refusal());
  EXPECT_LE(plan->chosen().prediction().peak_bytes(), plan->usable_bytes());
  EXPECT_EQ(plan->usable_bytes(), static_cast<int64_t>(0.9 * (64 << 20)));
  ASSERT_GE(plan->frontier_size(), 2);
  EXPECT_LE(plan->frontier_size(), v1::LIMIT_MAX_FRONTIER);
  for (int i = 1; i < plan->frontier_size(); ++i) {
    EXPECT_LT(plan->frontier(i - 1).prediction().peak_bytes(), plan->frontier(i).prediction().peak_bytes());
  }
  EXPECT_GT(plan->full_backprop().prediction().peak_bytes(), 0);

  request.memory_budget_bytes = int64_t{1} << 20;
  plan = SearchMemoryPlan(request, Profile(), /*include_frontier=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->has_chosen());
  ASSERT_TRUE(plan->has_refusal());
  EXPECT_THAT(plan->refusal(), HasSubstr("MiB"));
  EXPECT_GT(plan->least_peak_bytes(), plan->usable_bytes());
  EXPECT_EQ(plan->frontier_size(), 0);
}

TEST(PlanProtoTest, PlanSummaryIsOneLine) {
  performer::Plan plan;
  EXPECT_EQ(PlanSummary(plan), "full back-propagation");
  plan.slice = 256;
  plan.block = 64;
  EXPECT_EQ(PlanSummary(plan), "C = 256, chunked/64, reverse");
}

}  // namespace
}  // namespace slimfit::planner
