#include "planner/plan_search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "planner/bptt_schedule.h"

namespace slimfit::planner {

using performer::FrontPolicy;
using performer::Plan;
using performer::PrefixMode;

absl::string_view ObjectiveName(Objective objective) {
  return objective == Objective::kTime ? "time" : "memory";
}

absl::StatusOr<Objective> ParseObjective(absl::string_view name) {
  if (name == "time") return Objective::kTime;
  if (name == "memory") return Objective::kMemory;
  return absl::InvalidArgumentError(absl::StrCat("unknown objective '", name, "'; expected time or memory"));
}

std::string HumanBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::abs(bytes) >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrFormat("%.0f B", bytes) : absl::StrFormat("%.1f %s", bytes, kUnits[unit]);
}

namespace {

// dp candidates: programs over at most this many slices and budgets (keeps a search under seconds).
constexpr int64_t kMaxDpSlices = 4096;
constexpr int64_t kMaxDpSlots = 512;
// Longer sequences than any device could hold the tokens of (2^40); also keeps the doubling of C
// far from overflow.
constexpr int64_t kMaxSequenceLength = int64_t{1} << 40;

std::vector<Plan> Candidates(const PlanSearchRequest& request, const DeviceProfile& profile) {
  const int64_t length = request.workload.seq_len;
  const performer::ModelConfig& model = request.workload.model;
  std::vector<int64_t> slices;
  // 1, 2, 4, … below L, then L (doubling stops before it could overflow).
  for (int64_t c = 1; c < length; c *= 2) {
    slices.push_back(c);
    if (c > length / 2) break;
  }
  slices.push_back(length);

  std::vector<Plan> plans;
  Plan base;
  base.dtype = request.dtype;
  base.bf16_products = request.bf16_products;
  base.threads = profile.threads;
  // Chunked prefix sums in blocks of 64 (or C when smaller): cumsum materialises k·M·d values per
  // token and is never the better trade on these sizes, and other blocks change memory by a few
  // percent while adding per-block overhead the time model does not resolve.
  base.prefix_mode = PrefixMode::kChunked;
  base.block = 64;
  plans.push_back(base);  // full back-propagation
  const double front = static_cast<double>(FrontBytes(model, request.dtype));
  for (int64_t c : slices) {
    for (performer::LayerRecompute recompute :
         {performer::LayerRecompute::kNone, performer::LayerRecompute::kLayers}) {
      Plan plan = base;
      plan.slice = c;
      plan.block = std::min<int64_t>(64, c);
      plan.recompute = recompute;
      const int64_t n = (length + c - 1) / c;
      for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore}) {
        plan.front_policy = policy;
        plans.push_back(plan);
      }
      plan.front_policy = FrontPolicy::kResync;
      for (int64_t r : {int64_t{8}, int64_t{32}, int64_t{128}}) {
        if (r >= n) continue;
        plan.resync_every = r;
        plans.push_back(plan);
      }
      plan.resync_every = 0;
      plan.front_policy = FrontPolicy::kDp;
      if (n < 2 || n > kMaxDpSlices) continue;
      const double graph = static_cast<double>(SliceGraphBytes(model, c, plan, profile));
      for (ScheduleKind kind : {ScheduleKind::kHsm, ScheduleKind::kIsm, ScheduleKind::kMsm}) {
        plan.schedule = kind;
        plan.alpha = kind == ScheduleKind::kMsm ? (graph + front) / front : 0;
        plan.beta = kind == ScheduleKind::kMsm ? std::max(graph / front, 1e-3) : 0;
        if (kind == ScheduleKind::kMsm && plan.alpha > 16) continue;
        for (int64_t slots = 1; slots < n && slots <= kMaxDpSlots; slots *= 2) {
          plan.slots = slots;
          plans.push_back(plan);
        }
      }
    }
  }
  // Every plan but the dp programs (whose schedules are the search's costly part) once more with
  // one weight layout, for budgets the forward copies do not fit.
  if (ForwardCopiesApply(profile, request.dtype, request.bf16_products)) {
    const size_t with_copies = plans.size();
    for (size_t i = 0; i < with_copies; ++i) {
      if (plans[i].front_policy == FrontPolicy::kDp) continue;
      plans.push_back(plans[i]);
      plans.back().copy_forward_weights = false;
    }
  }
  return plans;
}

std::string Describe(const Plan& plan) {
  if (plan.slice == 0) {
    return absl::StrCat(
        plan.copy_forward_weights ? "full back-propagation" : "full back-propagation, one weight layout",
        plan.bf16_products ? ", bfloat16 products" : "");
  }
  std::string text = absl::StrCat("C=", plan.slice, " ", performer::PrefixModeName(plan.prefix_mode));
  if (plan.prefix_mode == PrefixMode::kChunked) absl::StrAppend(&text, "/", plan.block);
  absl::StrAppend(&text, " ", performer::FrontPolicyName(plan.front_policy));
  if (plan.front_policy == FrontPolicy::kResync) absl::StrAppend(&text, " every ", plan.resync_every);
  if (plan.front_policy == FrontPolicy::kDp) {
    absl::StrAppend(&text, " ", ScheduleKindName(plan.schedule), " ", plan.slots, " slots");
  }
  if (plan.recompute == performer::LayerRecompute::kLayers) absl::StrAppend(&text, ", layers recomputed");
  if (!plan.copy_forward_weights) absl::StrAppend(&text, ", one weight layout");
  if (plan.bf16_products) absl::StrAppend(&text, ", bfloat16 products");
  return text;
}

}  // namespace

absl::StatusOr<PlanSearchResult> SearchPlans(const PlanSearchRequest& request, const DeviceProfile& profile) {
  if (absl::Status s = request.workload.model.Validate(); !s.ok()) return s;
  if (absl::Status s = profile.Validate(); !s.ok()) return s;
  if (request.workload.seq_len < 1 || request.workload.seq_len > kMaxSequenceLength) {
    return absl::InvalidArgumentError(absl::StrCat("sequence length must be in 1..", kMaxSequenceLength,
                                                   ", got ", request.workload.seq_len));
  }
  if (absl::Status s = CheckDocuments(request.workload.documents, request.workload.seq_len,
                                      "workload.documents", "workload.seq_len");
      !s.ok()) {
    return s;
  }
  if (request.memory_budget_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory budget must be positive, got ", request.memory_budget_bytes));
  }
  if (!(request.safety_margin >= 0 && request.safety_margin < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("safety margin must be in [0, 1), got ", request.safety_margin));
  }
  if (request.bf16_products && request.dtype != performer::DType::kFloat32) {
    return absl::InvalidArgumentError(performer::Bf16ProductsDTypeError(request.dtype));
  }
  const double usable = static_cast<double>(request.memory_budget_bytes) * (1.0 - request.safety_margin);

  PlanSearchResult result;
  std::vector<PlanCandidate> all;
  // One solved program per (kind, slices, α, β), asked for every budget.
  std::map<std::tuple<ScheduleKind, int64_t, double, double>, absl::StatusOr<BpttPolicy>> policies;
  for (Plan plan : Candidates(request, profile)) {
    int64_t dp_forwards = 0;
    if (plan.front_policy == FrontPolicy::kDp) {
      const int64_t slices = (request.workload.seq_len + plan.slice - 1) / plan.slice;
      const auto key = std::make_tuple(plan.schedule, slices, plan.alpha, plan.beta);
      auto it = policies.find(key);
      if (it == policies.end()) {
        it = policies
                 .emplace(key, BpttPolicy::Create(plan.schedule, slices, std::min(slices, kMaxDpSlots),
                                                  plan.alpha, plan.beta))
                 .first;
      }
      if (!it->second.ok()) continue;
      absl::StatusOr<int64_t> cost = it->second->Cost(slices, plan.slots);
      if (!cost.ok()) continue;
      dp_forwards = *cost;
    }
    absl::StatusOr<Prediction> prediction = PredictWithForwards(request.workload, plan, profile, dp_forwards);
    if (!prediction.ok()) continue;  // e.g. a schedule too long for the programs' tables
    // A profile of valid but extreme values (a rate of 1e-300 FLOP/s) predicts no finite time:
    // such a plan cannot be compared with any other.
    if (!std::isfinite(prediction->seconds)) continue;
    plan.predicted_peak_bytes = prediction->peak_bytes;
    plan.predicted_time_s = prediction->seconds;
    all.push_back(PlanCandidate{plan, *prediction});
  }
  result.candidates_considered = static_cast<int64_t>(all.size());
  for (const PlanCandidate& candidate : all) {
    result.candidate_points.emplace_back(candidate.prediction.peak_bytes, candidate.prediction.seconds);
  }
  if (all.empty()) {
    return absl::InvalidArgumentError(
        "device profile: no plan has a finite predicted time (are its rates and overheads realistic?)");
  }
  for (const PlanCandidate& candidate : all) {
    if (candidate.plan.slice == 0 && candidate.plan.prefix_mode == PrefixMode::kChunked &&
        (result.full_backprop.plan.predicted_time_s == 0 ||
         candidate.prediction.seconds < result.full_backprop.prediction.seconds)) {
      result.full_backprop = candidate;
    }
  }

  // Pareto frontier: by increasing peak, keep those strictly faster than every smaller one.
  std::vector<PlanCandidate> sorted = all;
  std::sort(sorted.begin(), sorted.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    if (a.prediction.peak_bytes != b.prediction.peak_bytes)
      return a.prediction.peak_bytes < b.prediction.peak_bytes;
    return a.prediction.seconds < b.prediction.seconds;
  });
  double best_time = INFINITY;
  for (const PlanCandidate& candidate : sorted) {
    if (candidate.prediction.seconds < best_time) {
      result.frontier.push_back(candidate);
      best_time = candidate.prediction.seconds;
    }
  }

  const PlanCandidate& least = result.frontier.front();
  if (static_cast<double>(least.prediction.peak_bytes) > usable) {
    const Prediction& p = least.prediction;
    const int64_t fixed = p.parameter_bytes + p.gradient_bytes + p.optimizer_bytes + p.resident_bytes;
    const std::string budget = absl::StrFormat(
        "the budget allows %s (%s less a %.0f%% margin)", HumanBytes(usable),
        HumanBytes(static_cast<double>(request.memory_budget_bytes)), 100 * request.safety_margin);
    if (static_cast<double>(fixed) > usable) {
      std::vector<std::string> parts = {"parameters", "gradients"};
      if (p.optimizer_bytes > 0) parts.push_back("optimizer state");
      if (p.resident_bytes > 0) {
        parts.push_back(absl::StrCat("the device's resident overhead (",
                                     HumanBytes(static_cast<double>(p.resident_bytes)), ")"));
      }
      const std::string last = parts.back();
      parts.pop_back();
      return absl::ResourceExhaustedError(absl::StrCat(absl::StrJoin(parts, ", "), " and ", last,
                                                       " alone need ", HumanBytes(static_cast<double>(fixed)),
                                                       "; ", budget));
    }
    return absl::ResourceExhaustedError(absl::StrCat("needs at least ",
                                                     HumanBytes(static_cast<double>(p.peak_bytes)), " (",
                                                     Describe(least.plan), "); ", budget));
  }

  const PlanCandidate* chosen = nullptr;
  for (const PlanCandidate& candidate : result.frontier) {
    if (static_cast<double>(candidate.prediction.peak_bytes) > usable) break;
    if (request.objective == Objective::kMemory) {
      chosen = &candidate;
      break;
    }
    chosen = &candidate;  // frontier times decrease with peak: the last that fits is fastest
  }
  result.chosen = *chosen;
  const double full_time = result.full_backprop.prediction.seconds;
  result.reason = absl::StrFormat(
      "%s under %s usable (%s budget less %.0f%%): %s, predicted %s and %.3g s (%.2fx full back-propagation, "
      "which "
      "needs %s)",
      request.objective == Objective::kTime ? "fastest plan" : "least memory", HumanBytes(usable),
      HumanBytes(static_cast<double>(request.memory_budget_bytes)), 100 * request.safety_margin,
      Describe(result.chosen.plan), HumanBytes(static_cast<double>(result.chosen.prediction.peak_bytes)),
      result.chosen.prediction.seconds, result.chosen.prediction.seconds / full_time,
      HumanBytes(static_cast<double>(result.full_backprop.prediction.peak_bytes)));
  result.chosen.plan.reason = result.reason;
  return result;
}

}  // namespace slimfit::planner
