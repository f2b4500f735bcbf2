// The memory/time picture of one plan search as an SVG chart (`slimfit plan --svg FILE` and the
// coordinator's status page): every candidate the planner considered (predicted peak against
// predicted seconds per sequence), the Pareto frontier, the chosen plan and full back-propagation
// marked, and the budget with its usable part as vertical lines.
//
// Thread safety: a pure function.
#ifndef SLIMFIT_PLANNER_PLAN_CHART_H_
#define SLIMFIT_PLANNER_PLAN_CHART_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "planner/plan_proto.h"
#include "planner/plan_search.h"

namespace slimfit::planner {

// `usable_bytes`: the budget less the safety margin.
absl::StatusOr<std::string> PlanFrontierSvg(const PlanSearchResult& result, int64_t budget_bytes,
                                            int64_t usable_bytes, const std::string& title);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_PLAN_CHART_H_
