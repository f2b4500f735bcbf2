// Plans hold: calibrate this machine, ask the planner for plans over a small grid of models,
// sequence lengths and budgets, run the engine with exactly each plan and check that the measured
// peak never exceeds the budget and that predicted memory is within 15% of the measurement.
// (Time predictions are checked by //bench:plan_accuracy_bench, not here: timings are not
// assertions; see BENCHMARKS.md.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "performer/gradient_engine.h"
#include "performer/performer_model.h"
#include "planner/bptt_schedule.h"
#include "planner/calibration.h"
#include "planner/cost_model.h"
#include "planner/plan_search.h"

namespace slimfit {
namespace {

TEST(PlanHoldsTest, MeasuredPeaksStayUnderBudgetsAndMatchPredictions) {
  planner::CalibrationOptions calibration;
  calibration.threads = 1;
  calibration.models = {planner::ProbeModel(64), planner::ProbeModel(128)};
  calibration.seq_len = 512;
  calibration.slices = {16, 64, 0};
  calibration.repeats = 1;
  absl::StatusOr<planner::CalibrationResult> calibrated = planner::Calibrate(calibration);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  const planner::DeviceProfile& profile = calibrated->profile;

  int runs = 0;
  for (int64_t width : {64, 128}) {
    const performer::ModelConfig config = planner::ProbeModel(width);
    absl::StatusOr<performer::PerformerModel> model =
        performer::PerformerModel::Create(config, performer::DType::kFloat32, at::kCPU, 3);
    ASSERT_TRUE(model.ok());
    const int64_t fixed = 2 * model->parameter_bytes();
    for (int64_t length : {512, 2048}) {
      performer::PackedBatch batch;
      std::mt19937_64 generator(length);
      for (int64_t i = 0; i < length; ++i)
        batch.tokens.push_back(static_cast<int64_t>(generator() % config.vocab));
      for (double headroom :
           {1.3, 2.0, 4.0}) {  // budgets a little, twice and four times above the fixed part
        planner::PlanSearchRequest request;
        request.workload = planner::Workload{config, length};
        request.memory_budget_bytes = static_cast<int64_t>(headroom * static_cast<double>(fixed)) + (1 << 20);
        absl::StatusOr<planner::PlanSearchResult> search = planner::SearchPlans(request, profile);
        if (!search.ok()) {
          EXPECT_EQ(search.status().code(), absl::StatusCode::kResourceExhausted) << search.status();
          continue;
        }
        performer::Plan plan = search->chosen.plan;
        plan.threads = 0;
        performer::GradientOptions options;
        options.dp_schedule = planner::ScheduleForPlan;
        absl::StatusOr<performer::GradientResult> result =
            performer::ComputeGradient(*model, batch, plan, options);
        ASSERT_TRUE(result.ok()) << result.status();
        const int64_t measured = result->peak_bytes - result->start_bytes + model->parameter_bytes();
        EXPECT_LE(measured, request.memory_budget_bytes) << plan.DebugString();
        const double error = std::abs(static_cast<double>(search->chosen.prediction.peak_bytes - measured)) /
                             static_cast<double>(measured);
        EXPECT_LE(error, 0.15) << plan.DebugString() << " predicted " << search->chosen.prediction.peak_bytes
                               << " measured " << measured;
        ++runs;
      }
    }
  }
  EXPECT_GE(runs, 8);
}

}  // namespace
}  // namespace slimfit
