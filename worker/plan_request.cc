#include "worker/plan_request.h"

#include "absl/strings/str_cat.h"
#include "planner/plan_proto.h"
#include "planner/plan_request_builder.h"
#include "worker/shard_request.h"

namespace slimfit::worker {

absl::StatusOr<planner::PlanSearchRequest> ValidatePlanRequest(const v1::PlanRequest& request,
                                                               int64_t worker_budget_bytes) {
  if (!request.has_model()) return InvalidField("model", "required");
  absl::StatusOr<performer::ModelConfig> model = planner::ModelConfigFromProto(request.model(), "model");
  if (!model.ok()) return InvalidField("model", model.status().message());
  if (request.has_objective() && !v1::Objective_IsValid(request.objective())) {
    return InvalidField("objective", absl::StrCat("unknown value ", request.objective()));
  }
  planner::PlanRequestInputs inputs;
  inputs.model = *model;
  inputs.sequence_length = request.sequence_length();
  inputs.documents = request.has_documents() ? request.documents() : 1;
  inputs.memory_budget_bytes =
      request.has_memory_budget_bytes() ? request.memory_budget_bytes() : worker_budget_bytes;
  inputs.objective = planner::ObjectiveFromProto(request.objective());
  if (request.has_dtype()) {
    absl::StatusOr<performer::DType> dtype = planner::DTypeFromProto(request.dtype(), "dtype");
    if (!dtype.ok()) return InvalidField("dtype", dtype.status().message());
    inputs.dtype = *dtype;
  }
  inputs.bf16_products = request.bf16_products();
  inputs.safety_margin = request.has_safety_margin() ? request.safety_margin() : kSafetyMargin;
  return planner::BuildPlanSearchRequest(inputs);
}

}  // namespace slimfit::worker
