#include "planner/plan_search.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace slimfit::planner {
namespace {

using ::testing::HasSubstr;

PlanSearchRequest ConfigA(int64_t budget_mib) {
  PlanSearchRequest request;
  request.workload.model.d_model = 256;
  request.workload.model.layers = 2;
  request.workload.model.heads = 4;
  request.workload.model.d_ff = 1024;
  request.workload.seq_len = 4096;
  request.memory_budget_bytes = budget_mib << 20;
  return request;
}

DeviceProfile Profile() {
  DeviceProfile p;
  p.flops_per_second = 3e11;
  p.half_rate_rows = 50;
  p.seconds_per_element = 1e-9;
  p.layer_overhead_s = 2e-4;
  return p;
}

TEST(PlanSearchTest, ChosenPlanFitsTheBudgetAndIsTheFastestThatDoes) {
  for (int64_t budget : {16, 24, 32, 64, 256}) {
    const PlanSearchRequest request = ConfigA(budget);
    absl::StatusOr<PlanSearchResult> result = SearchPlans(request, Profile());
    ASSERT_TRUE(result.ok()) << budget << ": " << result.status();
    const double usable = 0.9 * static_cast<double>(request.memory_budget_bytes);
    EXPECT_LE(result->chosen.prediction.peak_bytes, usable);
    for (const PlanCandidate& c : result->frontier) {
      if (c.prediction.peak_bytes <= usable) {
        EXPECT_GE(c.prediction.seconds, result->chosen.prediction.seconds);
      }
    }
    EXPECT_EQ(result->chosen.plan.predicted_peak_bytes, result->chosen.prediction.peak_bytes);
    EXPECT_THAT(result->reason, HasSubstr("fastest plan"));
  }
  // A generous budget runs ordinary back-propagation.
  EXPECT_EQ(SearchPlans(ConfigA(1024), Profile())->chosen.plan.slice, 0);
}

TEST(PlanSearchTest, KeepsOneWeightLayoutOnlyWhenTheForwardCopiesDoNotFit) {
  // 16 MiB: parameters and gradients take 11.8; the 4.2 MiB of copies leave no room for a slice.
  absl::StatusOr<PlanSearchResult> tight = SearchPlans(ConfigA(16), Profile());
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_FALSE(tight->chosen.plan.copy_forward_weights);
  EXPECT_THAT(tight->reason, HasSubstr("one weight layout"));
  for (int64_t budget : {32, 64, 256}) {
    EXPECT_TRUE(SearchPlans(ConfigA(budget), Profile())->chosen.plan.copy_forward_weights) << budget;
  }
}

TEST(PlanSearchTest, FrontierIsParetoOptimal) {
  absl::StatusOr<PlanSearchResult> result = SearchPlans(ConfigA(64), Profile());
  ASSERT_TRUE(result.ok());
  ASSERT_GE(result->frontier.size(), 3u);
  for (size_t i = 1; i < result->frontier.size(); ++i) {
    EXPECT_GT(result->frontier[i].prediction.peak_bytes, result->frontier[i - 1].prediction.peak_bytes);
    EXPECT_LT(result->frontier[i].prediction.seconds, result->frontier[i - 1].prediction.seconds);
  }
  EXPECT_GT(result->candidates_considered, static_cast<int64_t>(result->frontier.size()));
  EXPECT_EQ(result->full_backprop.plan.slice, 0);
}

TEST(PlanSearchTest, MemoryObjectivePicksTheLeastPeak) {
  PlanSearchRequest request = ConfigA(64);
  request.objective = Objective::kMemory;
  absl::StatusOr<PlanSearchResult> result = SearchPlans(request, Profile());
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->chosen.prediction.peak_bytes, result->frontier.front().prediction.peak_bytes);
}

TEST(PlanSearchTest, NothingFitsSaysWhatDominates) {
  absl::StatusOr<PlanSearchResult> result = SearchPlans(ConfigA(8), Profile());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("parameters and gradients alone need 11.8 MiB"));
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("the budget allows 7.2 MiB (8.0 MiB less a 10% margin)"));
  // A GPU's workspaces count among what no plan can shed.
  DeviceProfile gpu = Profile();
  gpu.resident_overhead_bytes = 2 << 20;
  result = SearchPlans(ConfigA(8), gpu);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      std::string(result.status().message()),
      HasSubstr("parameters, gradients and the device's resident overhead (2.0 MiB) alone need 13.8 MiB"));
  // Just above parameters and gradients: the least plan itself does not fit.
  PlanSearchRequest tight = ConfigA(0);
  tight.memory_budget_bytes = static_cast<int64_t>(11.9 * (1 << 20) / 0.9);
  result = SearchPlans(tight, Profile());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("needs at least"));
}

// A job with bfloat16 products: every candidate has them, the chosen plan says so, and the
// predictions are the float32 plan's with the bfloat16 copies and the device's bfloat16 constants
// on the linear maps' products.
TEST(PlanSearchTest, Bf16ProductsAreInEveryCandidate) {
  PlanSearchRequest request = ConfigA(64);
  request.bf16_products = true;
  DeviceProfile profile = Profile();
  profile.bf16_flops_per_second = 2 * profile.flops_per_second;
  profile.bf16_half_rate_rows = profile.half_rate_rows;
  profile.bf16_layer_overhead_s = profile.layer_overhead_s;
  absl::StatusOr<PlanSearchResult> result = SearchPlans(request, profile);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->chosen.plan.bf16_products);
  EXPECT_TRUE(result->full_backprop.plan.bf16_products);
  for (const PlanCandidate& c : result->frontier) EXPECT_TRUE(c.plan.bf16_products);
  EXPECT_THAT(result->reason, HasSubstr("bfloat16 products"));
  // The candidates are predicted as bfloat16 plans: the cost model's, faster than the float32 plan
  // but not twice (only the linear maps' products run at twice the rate).
  performer::Plan float32 = result->chosen.plan;
  float32.bf16_products = false;
  const double float32_seconds = Predict(request.workload, float32, profile)->seconds;
  EXPECT_DOUBLE_EQ(result->chosen.prediction.seconds,
                   Predict(request.workload, result->chosen.plan, profile)->seconds);
  EXPECT_LT(result->chosen.prediction.seconds, float32_seconds);
  EXPECT_GT(result->chosen.prediction.seconds, 0.5 * float32_seconds);
  EXPECT_EQ(result->chosen.prediction.peak_bytes,
            Predict(request.workload, result->chosen.plan, profile)->peak_bytes);
  request.dtype = performer::DType::kFloat64;
  EXPECT_THAT(std::string(SearchPlans(request, profile).status().message()),
              HasSubstr("bfloat16 products need dtype float32"));
}

TEST(PlanSearchTest, BadRequestsAreRejected) {
  PlanSearchRequest request = ConfigA(64);
  request.memory_budget_bytes = 0;
  EXPECT_EQ(SearchPlans(request, Profile()).status().code(), absl::StatusCode::kInvalidArgument);
  request = ConfigA(64);
  request.safety_margin = 1.5;
  EXPECT_EQ(SearchPlans(request, Profile()).status().code(), absl::StatusCode::kInvalidArgument);
  request = ConfigA(64);
  request.workload.documents = request.workload.seq_len + 1;  // more documents than tokens
  EXPECT_THAT(std::string(SearchPlans(request, Profile()).status().message()),
              HasSubstr("workload.documents: must be between 1 and workload.seq_len (4096), got 4097"));
  EXPECT_EQ(ParseObjective("speed").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlanSearchTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(37.5 * 1024 * 1024), "37.5 MiB");
  EXPECT_EQ(HumanBytes(2.0 * 1024 * 1024 * 1024), "2.0 GiB");
}

}  // namespace
}  // namespace slimfit::planner

namespace slimfit::planner {
namespace {

// A worker's registration can carry any valid profile: one whose extreme values make every
// predicted time infinite is refused with a reason, never a crash (a fuzzing finding).
TEST(PlanSearchTest, AProfileThatPredictsNoFiniteTimeIsRefused) {
  DeviceProfile slow = Profile();
  slow.flops_per_second = 1e-300;
  absl::StatusOr<PlanSearchResult> result = SearchPlans(ConfigA(64), slow);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("finite predicted time"));
  DeviceProfile overhead = Profile();
  overhead.layer_overhead_s = 1e308;
  EXPECT_EQ(SearchPlans(ConfigA(64), overhead).status().code(), absl::StatusCode::kInvalidArgument);
}

// Values no device comes near are refused up front, so that predicted peaks cannot overflow.
TEST(PlanSearchTest, AProfileBeyondAnyDeviceIsRefused) {
  DeviceProfile p = Profile();
  p.resident_overhead_bytes = int64_t{1} << 50;
  EXPECT_TRUE(p.Validate().ok());
  p.resident_overhead_bytes = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(SearchPlans(ConfigA(64), p).status().message(), HasSubstr("at most 1 PiB"));
  p = Profile();
  p.activation_scale = 1e4;
  EXPECT_THAT(p.Validate().message(), HasSubstr("at most 1000"));
  p = Profile();
  p.backward_factor = 1e300;
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::planner
