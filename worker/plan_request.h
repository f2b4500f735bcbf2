// What a worker checks in a Worker.Plan request (proto/workers.proto PlanRequest) before it runs
// the planner with its own profile, as a pure function: the model, the sequence length, the
// documents, the budget (the worker's own when absent), the objective, the dtype and the safety
// margin.
//
// Example:
//   absl::StatusOr<planner::PlanSearchRequest> search = ValidatePlanRequest(request, budget);
//   if (!search.ok()) return search.status();  // INVALID_ARGUMENT naming the field
//   absl::StatusOr<v1::MemoryPlan> plan = planner::SearchMemoryPlan(*search, profile, true);
//
// Thread safety: a pure function.
#ifndef SLIMFIT_WORKER_PLAN_REQUEST_H_
#define SLIMFIT_WORKER_PLAN_REQUEST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "planner/plan_search.h"
#include "proto/slimfit.pb.h"

namespace slimfit::worker {

// The request as a plan search. Absent fields take the proto's defaults: documents 1, the worker's
// `worker_budget_bytes`, OBJECTIVE_TIME, float32, a 10% margin (kSafetyMargin). Built by
// planner::BuildPlanSearchRequest, as every plan search is. INVALID_ARGUMENT naming the field, in
// the message and in ErrorDetail.field: no model or an invalid one, a sequence length below 1,
// documents outside 1..sequence_length, a budget ≤ 0, an unknown objective or dtype, a margin
// outside [0, 1), bfloat16 products without float32. The search itself checks the workload further
// (e.g. its length bound).
[[nodiscard]] absl::StatusOr<planner::PlanSearchRequest> ValidatePlanRequest(const v1::PlanRequest& request,
                                                                             int64_t worker_budget_bytes);

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_PLAN_REQUEST_H_
