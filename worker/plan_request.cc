#include "worker/plan_request.h"

#include "absl/strings/str_cat.h"
#include "planner/plan_proto.h"
#include "worker/shard_request.h"

namespace slimfit::worker {

absl::StatusOr<planner::PlanSearchRequest> ValidatePlanRequest(const v1::PlanRequest& request,
                                                               int64_t worker_budget_bytes) {
  planner::PlanSearchRequest search;
  if (!request.has_model()) return InvalidField("model", "required");
  absl::StatusOr<performer::ModelConfig> model = planner::ModelConfigFromProto(request.model(), "model");
  if (!model.ok()) return InvalidField("model", model.status().message());
  search.workload.model = *model;
  if (request.sequence_length() < 1) {
    return InvalidField("sequence_length", absl::StrCat("must be >= 1, got ", request.sequence_length()));
  }
  search.workload.seq_len = request.sequence_length();
  search.workload.documents = request.has_documents() ? request.documents() : 1;
  if (search.workload.documents < 1 || search.workload.documents > search.workload.seq_len) {
    return InvalidField("documents", absl::StrCat("must be between 1 and sequence_length ",
                                                  search.workload.seq_len, ", got ", request.documents()));
  }
  search.memory_budget_bytes =
      request.has_memory_budget_bytes() ? request.memory_budget_bytes() : worker_budget_bytes;
  if (search.memory_budget_bytes <= 0) {
    return InvalidField("memory_budget_bytes",
                        absl::StrCat("must be > 0, got ", request.memory_budget_bytes()));
  }
  if (request.has_objective() && !v1::Objective_IsValid(request.objective())) {
    return InvalidField("objective", absl::StrCat("unknown value ", request.objective()));
  }
  search.objective = planner::ObjectiveFromProto(request.objective());
  if (request.has_dtype()) {
    absl::StatusOr<performer::DType> dtype = planner::DTypeFromProto(request.dtype(), "dtype");
    if (!dtype.ok()) return InvalidField("dtype", dtype.status().message());
    search.dtype = *dtype;
  }
  search.bf16_products = request.bf16_products();
  if (search.bf16_products && search.dtype != performer::DType::kFloat32) {
    return InvalidField("bf16_products", performer::Bf16ProductsDTypeError(search.dtype));
  }
  search.safety_margin = request.has_safety_margin() ? request.safety_margin() : kSafetyMargin;
  if (!(search.safety_margin >= 0 && search.safety_margin < 1)) {
    return InvalidField("safety_margin", absl::StrCat("must be in [0, 1), got ", request.safety_margin()));
  }
  return search;
}

}  // namespace slimfit::worker
