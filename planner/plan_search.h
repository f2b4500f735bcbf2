// Plan search: for a model, a sequence, a device profile and a memory budget, the plan with the
// least predicted time whose predicted peak stays under the budget with a safety margin (or, with
// Objective::kMemory, the least predicted peak), the Pareto frontier of (memory, time) over every
// candidate, ordinary back-propagation as a baseline, and a one-line reason.
//
// Candidates: full back-propagation; slices C = 1, 2, 4, …, L (and L) with chunked prefix sums
// (blocks 16…128 that fit C) or cumsum; front policies reverse, store, resync (r = 8, 32, 128) and
// dp with HSM and ISM programs at 1, 2, 4, … slots (MSM when a slice graph is at most 16 fronts).
//
// Example:
//   PlanSearchRequest request;
//   request.workload = {config, /*seq_len=*/4096};
//   request.memory_budget_bytes = 64 << 20;
//   absl::StatusOr<PlanSearchResult> result = SearchPlans(request, profile);
//
// Thread safety: pure function.
#ifndef SLIMFIT_PLANNER_PLAN_SEARCH_H_
#define SLIMFIT_PLANNER_PLAN_SEARCH_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "performer/plan.h"
#include "planner/cost_model.h"
#include "planner/device_profile.h"

namespace slimfit::planner {

enum class Objective { kTime, kMemory };
absl::string_view ObjectiveName(Objective objective);  // "time", "memory"
absl::StatusOr<Objective> ParseObjective(absl::string_view name);

struct PlanSearchRequest {
  Workload workload;
  int64_t memory_budget_bytes = 0;
  Objective objective = Objective::kTime;
  performer::DType dtype = performer::DType::kFloat32;
  // Every candidate with bfloat16 products (performer::Plan::bf16_products; float32 only).
  bool bf16_products = false;
  // Predicted peaks must stay at or below (1 − safety_margin) · budget.
  double safety_margin = 0.10;
};

struct PlanCandidate {
  performer::Plan plan;  // predicted_peak_bytes, predicted_time_s and reason filled in
  Prediction prediction;
};

struct PlanSearchResult {
  PlanCandidate chosen;
  std::vector<PlanCandidate> frontier;  // Pareto-optimal in (peak, time), by increasing peak
  PlanCandidate full_backprop;          // ordinary back-propagation of the same model
  std::string reason;                   // one line: why this plan
  int64_t candidates_considered = 0;
  // (predicted peak bytes, predicted seconds) of every candidate considered, in search order.
  std::vector<std::pair<int64_t, double>> candidate_points;
};

// INVALID_ARGUMENT for a bad workload, profile or budget. RESOURCE_EXHAUSTED when no candidate
// fits, saying what the least plan needs and what dominates it, e.g. "parameters and gradients
// alone need 37.5 MiB; the budget allows 28.8 MiB (32 MiB less a 10% margin)".
absl::StatusOr<PlanSearchResult> SearchPlans(const PlanSearchRequest& request, const DeviceProfile& profile);

// "37.5 MiB", "2.0 GiB", "512 B".
std::string HumanBytes(double bytes);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_PLAN_SEARCH_H_
