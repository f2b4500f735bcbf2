// Conversions between the planner's and engine's C++ values (performer::ModelConfig, Plan, DType;
// planner::Prediction, PlanCandidate, PlanSearchResult) and their slimfit.v1 wire messages.
//
// To-proto conversions fill every field. From-proto conversions apply the defaults documented in
// proto/slimfit.proto for absent optional fields, and return INVALID_ARGUMENT naming the field
// (prefixed by `field`, e.g. "spec.model.config.d_model") for an UNSPECIFIED enum or a value the
// C++ type cannot hold. They do not run the C++ Validate(); callers do, where the context is known.
//
// Thread safety: pure functions.
#ifndef SLIMFIT_PLANNER_PLAN_PROTO_H_
#define SLIMFIT_PLANNER_PLAN_PROTO_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "planner/cost_model.h"
#include "planner/plan_search.h"
#include "proto/slimfit.pb.h"

namespace slimfit::planner {

v1::ModelConfig ModelConfigToProto(const performer::ModelConfig& config);
// Absent fields take the ModelConfig defaults; then ModelConfig::Validate() runs (its message
// prefixed with `field`).
absl::StatusOr<performer::ModelConfig> ModelConfigFromProto(const v1::ModelConfig& proto,
                                                            absl::string_view field);

v1::DType DTypeToProto(performer::DType dtype);
absl::StatusOr<performer::DType> DTypeFromProto(v1::DType dtype, absl::string_view field);

v1::Plan PlanToProto(const performer::Plan& plan);
// Required enums must be set for sliced plans (slice > 0); the result is not validated against a
// sequence length (Plan::Validate does that).
absl::StatusOr<performer::Plan> PlanFromProto(const v1::Plan& proto, absl::string_view field);

v1::Prediction PredictionToProto(const Prediction& prediction);
Prediction PredictionFromProto(const v1::Prediction& proto);

v1::PlanCandidate CandidateToProto(const PlanCandidate& candidate);
absl::StatusOr<PlanCandidate> CandidateFromProto(const v1::PlanCandidate& proto, absl::string_view field);

v1::Objective ObjectiveToProto(Objective objective);
Objective ObjectiveFromProto(v1::Objective objective);  // UNSPECIFIED reads as kTime

// The planner's answer as a MemoryPlan: SearchPlans(request, profile); when nothing fits, a
// MemoryPlan with `refusal` (the search's RESOURCE_EXHAUSTED message) and `least_peak_bytes` (from
// a least-memory search without a budget) instead of an error. The frontier is cut to at most
// v1::LIMIT_MAX_FRONTIER entries evenly in peak bytes (both ends kept) when `include_frontier`,
// else left empty. Errors: INVALID_ARGUMENT from the search (workload, profile, budget, margin).
absl::StatusOr<v1::MemoryPlan> SearchMemoryPlan(const PlanSearchRequest& request,
                                                const DeviceProfile& profile, bool include_frontier);

// "C = 256, chunked/64, reverse" style one-line summary of a plan ("full back-propagation" for C = 0).
std::string PlanSummary(const performer::Plan& plan);
// PlanSummary of a wire plan; "C = <slice> (unreadable plan: <why>)" for a plan PlanFromProto refuses.
std::string PlanSummaryOf(const v1::Plan& plan);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_PLAN_PROTO_H_
