#include "planner/plan_request_builder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "planner/cost_model.h"
#include "rpc/rpc_util.h"

namespace slimfit::planner {

namespace {

// `status` (INVALID_ARGUMENT "<field>: …") with ErrorDetail.field = `field`.
absl::Status NamingField(absl::Status status, absl::string_view field) {
  v1::ErrorDetail detail;
  detail.set_field(std::string(field));
  return rpc::AttachErrorDetail(std::move(status), detail);
}

}  // namespace

absl::StatusOr<PlanSearchRequest> BuildPlanSearchRequest(const PlanRequestInputs& inputs,
                                                         const PlanRequestFields& fields) {
  if (inputs.sequence_length < 1) {
    return rpc::InvalidFieldError(fields.sequence_length,
                                  absl::StrCat("must be ≥ 1, got ", inputs.sequence_length));
  }
  if (absl::Status s =
          CheckDocuments(inputs.documents, inputs.sequence_length, fields.documents, fields.sequence_length);
      !s.ok()) {
    return NamingField(std::move(s), fields.documents);
  }
  if (inputs.sequences_per_shard < 1) {
    return rpc::InvalidFieldError(fields.sequences_per_shard,
                                  absl::StrCat("must be ≥ 1, got ", inputs.sequences_per_shard));
  }
  if (inputs.memory_budget_bytes.has_value() && *inputs.memory_budget_bytes <= 0) {
    return rpc::InvalidFieldError(fields.memory_budget_bytes,
                                  absl::StrCat("must be > 0, got ", *inputs.memory_budget_bytes));
  }
  if (!(inputs.safety_margin >= 0 && inputs.safety_margin < 1)) {
    return rpc::InvalidFieldError(fields.safety_margin,
                                  absl::StrCat("must be in [0, 1), got ", inputs.safety_margin));
  }
  if (inputs.bf16_products && inputs.dtype != performer::DType::kFloat32) {
    return rpc::InvalidFieldError(fields.bf16_products, performer::Bf16ProductsDTypeError(inputs.dtype));
  }
  PlanSearchRequest request;
  request.workload.model = inputs.model;
  request.workload.seq_len = inputs.sequence_length;
  request.workload.documents = inputs.documents;
  request.workload.optimizer_bytes_per_parameter = inputs.optimizer_bytes_per_parameter;
  request.workload.gradient_sum = inputs.sequences_per_shard > 1;
  request.memory_budget_bytes = inputs.memory_budget_bytes.value_or(0);
  request.objective = inputs.objective;
  request.dtype = inputs.dtype;
  request.bf16_products = inputs.bf16_products;
  request.safety_margin = inputs.safety_margin;
  return request;
}

int64_t JobSequencesPerShard(int64_t sequences_per_round, int64_t max_sequences_per_shard) {
  return max_sequences_per_shard > 0 ? std::min(sequences_per_round, max_sequences_per_shard)
                                     : sequences_per_round;
}

absl::StatusOr<PlanSearchRequest> JobPlanSearchRequest(const v1::JobSpec& spec,
                                                       const performer::ModelConfig& config,
                                                       int64_t documents, int64_t max_sequences_per_shard,
                                                       double safety_margin) {
  PlanRequestInputs inputs;
  inputs.model = config;
  inputs.sequence_length = spec.sequence_length();
  inputs.documents = documents;
  if (spec.sequence_length() > 0) {
    inputs.sequences_per_shard =
        JobSequencesPerShard(spec.tokens_per_round() / spec.sequence_length(), max_sequences_per_shard);
  }
  inputs.dtype = spec.dtype() == v1::DTYPE_FLOAT64 ? performer::DType::kFloat64 : performer::DType::kFloat32;
  inputs.bf16_products = spec.bf16_products();
  inputs.safety_margin = safety_margin;
  PlanRequestFields fields;
  fields.sequence_length = "spec.sequence_length";
  fields.sequences_per_shard = "spec.tokens_per_round";
  fields.bf16_products = "spec.bf16_products";
  return BuildPlanSearchRequest(inputs, fields);
}

}  // namespace slimfit::planner
