// The one place a plan search's request is put together and checked, for every caller: the
// coordinator's worker planner and GetMemoryPlan, the worker's Plan RPC and `slimfit plan`. Callers
// differ only in where the inputs come from (a job spec, a wire request, flags) and in the names
// their errors give the inputs, which they pass in; the rules (documents within the sequence, a
// running gradient sum for shards of several sequences, bfloat16 products in float32 only, the
// margin's range) are the same for all.
//
// Example (the worker's Plan RPC):
//   planner::PlanRequestInputs inputs;
//   inputs.model = *model;
//   inputs.sequence_length = request.sequence_length();
//   inputs.documents = request.has_documents() ? request.documents() : 1;
//   inputs.memory_budget_bytes = budget;
//   absl::StatusOr<planner::PlanSearchRequest> search = planner::BuildPlanSearchRequest(inputs);
//
// Thread safety: pure functions.
#ifndef SLIMFIT_PLANNER_PLAN_REQUEST_BUILDER_H_
#define SLIMFIT_PLANNER_PLAN_REQUEST_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "planner/plan_search.h"
#include "proto/slimfit.pb.h"

namespace slimfit::planner {

// What a plan search needs that varies between callers.
struct PlanRequestInputs {
  performer::ModelConfig model;  // the caller validates it (ModelConfigFromProto, ModelConfig::Validate)
  int64_t sequence_length = 0;   // L ≥ 1 (SearchPlans bounds it above)
  int64_t documents = 1;         // documents per sequence, 1..L
  // The most sequences one gradient call's shard holds (≥ 1): above 1 the worker keeps a running
  // gradient sum beside the call's own gradient (Workload::gradient_sum).
  int64_t sequences_per_shard = 1;
  // Optimizer state the device holds beside the gradient (`slimfit plan --optimizer=adam`); 0 for
  // jobs, whose optimizer steps on the coordinator.
  int64_t optimizer_bytes_per_parameter = 0;
  // > 0 when given; absent: left at 0 for the caller to set per worker (a job's search).
  std::optional<int64_t> memory_budget_bytes;
  Objective objective = Objective::kTime;
  performer::DType dtype = performer::DType::kFloat32;
  bool bf16_products = false;   // float32 only
  double safety_margin = 0.10;  // in [0, 1)
};

// The names errors give the inputs: a request's wire fields ("spec.documents") or flags
// ("--documents").
struct PlanRequestFields {
  std::string sequence_length = "sequence_length";
  std::string documents = "documents";
  std::string sequences_per_shard = "sequences_per_shard";
  std::string memory_budget_bytes = "memory_budget_bytes";
  std::string safety_margin = "safety_margin";
  std::string bf16_products = "bf16_products";
};

// The checked request. INVALID_ARGUMENT "<field>: <why>" with ErrorDetail.field = the field's name
// from `fields`: a sequence length below 1, documents outside 1..L (CheckDocuments), fewer than 1
// sequence per shard, a given budget ≤ 0, a margin outside [0, 1), bfloat16 products with a dtype
// other than float32.
absl::StatusOr<PlanSearchRequest> BuildPlanSearchRequest(const PlanRequestInputs& inputs,
                                                         const PlanRequestFields& fields = {});

// The most sequences a shard of a job holds: all `sequences_per_round` of a round (one worker may
// get them all), at most `max_sequences_per_shard` when that is > 0 (the coordinator's
// --max_sequences_per_shard). The worker planner and GetMemoryPlan both count a job's running
// gradient sum from it.
int64_t JobSequencesPerShard(int64_t sequences_per_round, int64_t max_sequences_per_shard);

// The plan search for a worker of a job: the job's model (`config`, resolved from its spec), L,
// `documents` per sequence (the most in any sequence of its data), JobSequencesPerShard of the
// spec's floor(tokens_per_round / L) sequences a round, the job's
// dtype and bfloat16 products, the coordinator's `safety_margin`. The budget is left at 0, for the
// caller to set per worker. INVALID_ARGUMENT as BuildPlanSearchRequest, fields named as in the spec
// ("spec.sequence_length", "spec.tokens_per_round" for a round shorter than L).
absl::StatusOr<PlanSearchRequest> JobPlanSearchRequest(const v1::JobSpec& spec,
                                                       const performer::ModelConfig& config,
                                                       int64_t documents, int64_t max_sequences_per_shard,
                                                       double safety_margin);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_PLAN_REQUEST_BUILDER_H_
