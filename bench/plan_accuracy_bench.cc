// plan_accuracy_bench: do plans hold? Calibrates the device, then for a grid of models, sequence
// lengths and budgets asks the planner for a plan, runs the engine with exactly that plan and
// prints predicted against measured peak memory and time, one JSON object per row; also runs a
// set of fixed policies per configuration so every front policy's prediction is checked.
//
//   bazel run -c opt //bench:plan_accuracy_bench -- --threads=2
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "performer/gradient_engine.h"
#include "performer/performer_model.h"
#include "planner/bptt_schedule.h"
#include "planner/calibration.h"
#include "planner/cost_model.h"
#include "planner/plan_search.h"

ABSL_FLAG(int, threads, 2, "compute threads");
ABSL_FLAG(std::string, seq_lens, "1024,4096,16384", "sequence lengths, comma-separated");
ABSL_FLAG(std::string, budgets_mib, "24,48,96,256", "memory budgets in MiB, comma-separated");
ABSL_FLAG(std::string, models, "small,medium,large",
          "model sizes: small (d128 f512), medium (d256 f1024), large (d512 f2048)");
ABSL_FLAG(bool, fixed_policies, true, "also run reverse/store/resync/dp plans at each of --fixed_slices");
ABSL_FLAG(std::string, fixed_slices, "64,256", "--fixed_policies: the slice sizes C, comma-separated");
ABSL_FLAG(int, repeats, 1, "timed runs per plan (median)");
ABSL_FLAG(bool, bf16_products, false,
          "every plan with bfloat16 products (Plan::bf16_products): the searches' and the fixed ones");
ABSL_FLAG(bool, above_fixed, false,
          "budgets are working memory above parameters and gradients (added to each budget)");

namespace slimfit {
namespace {

using performer::ComputeGradient;
using performer::GradientResult;
using performer::ModelConfig;
using performer::PackedBatch;
using performer::PerformerModel;
using performer::Plan;

ModelConfig Model(const std::string& name) {
  ModelConfig c;
  c.layers = 2;
  c.heads = 4;
  if (name == "small") {
    c.d_model = 128;
    c.d_ff = 512;
  } else if (name == "medium") {
    c.d_model = 256;
    c.d_ff = 1024;
  } else {
    c.d_model = 512;
    c.d_ff = 2048;
    c.heads = 8;
  }
  return c;
}

std::vector<int64_t> Ints(const std::string& text) {
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (absl::SimpleAtoi(part, &v)) values.push_back(v);
  }
  return values;
}

int Run() {
  planner::CalibrationOptions calibration;
  calibration.threads = absl::GetFlag(FLAGS_threads);
  absl::StatusOr<planner::CalibrationResult> calibrated = planner::Calibrate(calibration);
  if (!calibrated.ok()) {
    std::fprintf(stderr, "plan_accuracy_bench: %s\n", std::string(calibrated.status().message()).c_str());
    return 1;
  }
  const planner::DeviceProfile& profile = calibrated->profile;
  std::cout
      << absl::StrFormat(
             R"({"profile": {"activation_scale": %.4f, "activation_overhead_bytes": %d, "flops_per_second": %.4g, )"
             R"("half_rate_rows": %.2f, "seconds_per_element": %.3g, "layer_overhead_s": %.3g, )"
             R"("bf16_flops_per_second": %.4g, "bf16_half_rate_rows": %.2f, "bf16_layer_overhead_s": %.3g, )"
             R"("bf16_call_time_ratio": %.3f}})",
             profile.activation_scale, profile.activation_overhead_bytes, profile.flops_per_second,
             profile.half_rate_rows, profile.seconds_per_element, profile.layer_overhead_s,
             profile.bf16_flops_per_second, profile.bf16_half_rate_rows, profile.bf16_layer_overhead_s,
             calibrated->bf16_call_time_ratio)
      << std::endl;

  for (absl::string_view model_name : absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty())) {
    const ModelConfig config = Model(std::string(model_name));
    absl::StatusOr<PerformerModel> model =
        PerformerModel::Create(config, performer::DType::kFloat32, at::kCPU, 1);
    if (!model.ok()) return 1;
    for (int64_t length : Ints(absl::GetFlag(FLAGS_seq_lens))) {
      PackedBatch batch;
      std::mt19937_64 generator(length);
      for (int64_t i = 0; i < length; ++i)
        batch.tokens.push_back(static_cast<int64_t>(generator() % config.vocab));
      const planner::Workload workload{config, length};

      std::vector<std::pair<std::string, Plan>> plans;
      for (int64_t budget_mib : Ints(absl::GetFlag(FLAGS_budgets_mib))) {
        planner::PlanSearchRequest request;
        request.workload = workload;
        request.bf16_products = absl::GetFlag(FLAGS_bf16_products);
        request.memory_budget_bytes =
            (budget_mib << 20) + (absl::GetFlag(FLAGS_above_fixed) ? 2 * model->parameter_bytes() : 0);
        absl::StatusOr<planner::PlanSearchResult> search = planner::SearchPlans(request, profile);
        if (!search.ok()) {
          std::cout << absl::StrFormat(R"({"model": "%s", "seq_len": %d, "budget_mib": %d, "refused": "%s"})",
                                       model_name, length, budget_mib, search.status().message())
                    << std::endl;
          continue;
        }
        plans.emplace_back(absl::StrCat("budget:", request.memory_budget_bytes), search->chosen.plan);
      }
      if (absl::GetFlag(FLAGS_fixed_policies)) {
        for (int64_t c : Ints(absl::GetFlag(FLAGS_fixed_slices))) {
          Plan plan;
          plan.slice = c;
          plan.bf16_products = absl::GetFlag(FLAGS_bf16_products);
          plans.emplace_back("reverse", plan);
          plan.front_policy = performer::FrontPolicy::kStore;
          plans.emplace_back("store", plan);
          plan.front_policy = performer::FrontPolicy::kResync;
          plan.resync_every = 8;
          plans.emplace_back("resync", plan);
          plan.front_policy = performer::FrontPolicy::kDp;
          plan.slots = 4;
          plans.emplace_back("dp", plan);
          plan.front_policy = performer::FrontPolicy::kReverse;
          plan.recompute = performer::LayerRecompute::kLayers;
          plans.emplace_back("recompute", plan);
        }
      }
      for (auto& [label, plan] : plans) {
        plan.threads = 0;
        absl::StatusOr<planner::Prediction> predicted = planner::Predict(workload, plan, profile);
        if (!predicted.ok()) continue;
        // With bfloat16 products the same plan in float32 runs alternately with it, so that the
        // time model's bfloat16 term is checked apart from its float32 error.
        Plan float32 = plan;
        float32.bf16_products = false;
        std::vector<double> seconds, float32_seconds;
        GradientResult last;
        performer::GradientOptions options;
        options.dp_schedule = planner::ScheduleForPlan;
        for (int run = 0; run < std::max(1, absl::GetFlag(FLAGS_repeats)); ++run) {
          last = GradientResult();
          absl::StatusOr<GradientResult> result = ComputeGradient(*model, batch, plan, options);
          if (!result.ok()) {
            std::fprintf(stderr, "plan_accuracy_bench: %s\n", std::string(result.status().message()).c_str());
            return 1;
          }
          seconds.push_back(result->seconds);
          last = *std::move(result);
          if (!plan.bf16_products) continue;
          absl::StatusOr<GradientResult> reference = ComputeGradient(*model, batch, float32, options);
          if (!reference.ok()) {
            std::fprintf(stderr, "plan_accuracy_bench: %s\n",
                         std::string(reference.status().message()).c_str());
            return 1;
          }
          float32_seconds.push_back(reference->seconds);
        }
        std::sort(seconds.begin(), seconds.end());
        const double measured_time = seconds[seconds.size() / 2];
        std::string bf16_columns;
        if (plan.bf16_products) {
          std::sort(float32_seconds.begin(), float32_seconds.end());
          const double float32_time = float32_seconds[float32_seconds.size() / 2];
          absl::StatusOr<planner::Prediction> float32_predicted =
              planner::Predict(workload, float32, profile);
          bf16_columns = absl::StrFormat(R"(, "float32_time_s": %.4f, "bf16_ratio_measured": %.3f)",
                                         float32_time, measured_time / float32_time);
          if (float32_predicted.ok()) {
            absl::StrAppendFormat(&bf16_columns, R"(, "bf16_ratio_predicted": %.3f)",
                                  predicted->seconds / float32_predicted->seconds);
          }
        }
        // The call's own peak: tensors alive at its start (the parameters) plus what it allocated.
        const int64_t measured_peak = last.peak_bytes - last.start_bytes + model->parameter_bytes();
        std::cout
            << absl::StrFormat(
                   R"({"model": "%s", "seq_len": %d, "case": "%s", "plan": "%s", "predicted_peak": %d, )"
                   R"("measured_peak": %d, "memory_error": %.3f, "predicted_time_s": %.4f, "measured_time_s": %.4f, )"
                   R"("time_error": %.3f, "within_budget": %s%s})",
                   model_name, length, label, plan.DebugString(), predicted->peak_bytes, measured_peak,
                   (predicted->peak_bytes - measured_peak) / static_cast<double>(measured_peak),
                   predicted->seconds, measured_time, (predicted->seconds - measured_time) / measured_time,
                   absl::StartsWith(label, "budget:")
                       ? (measured_peak <= std::stoll(label.substr(7)) ? "true" : "false")
                       : "null",
                   bf16_columns)
            << std::endl;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace slimfit

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return slimfit::Run();
}
