// Fuzz target: the planner's wire conversions (planner/plan_proto.h) — ModelConfig, DType, Plan,
// Prediction and PlanCandidate messages as workers, clients and the coordinator receive them —
// and the cost model on what they accept (planner/cost_model.h Predict: a worker's budget check).
//
// Input: a binary slimfit.fuzz.PlanProtoInput (fuzz_inputs.proto). Invariants:
//   - refusals are INVALID_ARGUMENT whose message starts with the field path given;
//   - an accepted model is valid, and a model, dtype or candidate converted back to its message
//     and read again is the same (ToProto ∘ FromProto is a fixed point);
//   - for a plan that validates against the input's L and an accepted model, Predict succeeds or
//     refuses with INVALID_ARGUMENT, and a prediction's byte counts are ≥ 0 and add up to its peak.
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "fuzz/fuzz_inputs.pb.h"
#include "fuzz/fuzz_support.h"
#include "planner/cost_model.h"
#include "planner/device_profile.h"
#include "planner/plan_proto.h"

namespace slimfit::fuzz {
namespace {

void CheckRefusal(const absl::Status& status, absl::string_view field) {
  SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(status), status.ToString());
  SLIMFIT_FUZZ_CHECK(absl::StartsWith(status.message(), field), "message does not name ", field, ": ",
                     status.ToString());
}

void CheckPrediction(const performer::ModelConfig& model, const performer::Plan& plan, int64_t length,
                     int64_t documents) {
  planner::Workload workload;
  workload.model = model;
  workload.seq_len = length;
  workload.documents = documents;
  absl::StatusOr<planner::Prediction> prediction = planner::Predict(workload, plan, planner::DeviceProfile());
  if (!prediction.ok()) {
    SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(prediction.status()), prediction.status().ToString());
    return;
  }
  const planner::Prediction& p = *prediction;
  SLIMFIT_FUZZ_CHECK(p.parameter_bytes >= 0 && p.gradient_bytes >= 0 && p.optimizer_bytes >= 0 &&
                         p.kept_bytes >= 0 && p.working_bytes >= 0 && p.resident_bytes >= 0,
                     "negative bytes in a prediction for ", plan.DebugString());
  SLIMFIT_FUZZ_CHECK(p.peak_bytes == p.parameter_bytes + p.gradient_bytes + p.optimizer_bytes + p.kept_bytes +
                                         p.working_bytes + p.resident_bytes,
                     "peak is not the sum of its parts for ", plan.DebugString());
  SLIMFIT_FUZZ_CHECK(std::isfinite(p.seconds) && p.seconds >= 0, "seconds ", p.seconds, " for ",
                     plan.DebugString());
}

void CheckCandidate(const v1::PlanCandidate& proto, absl::string_view field,
                    const performer::ModelConfig* model, int64_t length, int64_t documents) {
  absl::StatusOr<planner::PlanCandidate> candidate = planner::CandidateFromProto(proto, field);
  if (!candidate.ok()) {
    CheckRefusal(candidate.status(), field);
    return;
  }
  const v1::PlanCandidate written = planner::CandidateToProto(*candidate);
  absl::StatusOr<planner::PlanCandidate> reread = planner::CandidateFromProto(written, field);
  SLIMFIT_FUZZ_CHECK(reread.ok(), "a written candidate does not read: ", reread.status().ToString());
  // Compared as bytes: a NaN field (alpha, beta, seconds) is not equal to itself.
  SLIMFIT_FUZZ_CHECK(planner::CandidateToProto(*reread).SerializeAsString() == written.SerializeAsString(),
                     "candidate round trip differs: ", written.ShortDebugString());
  SLIMFIT_FUZZ_CHECK(!planner::PlanSummary(candidate->plan).empty(), "empty plan summary");
  (void)candidate->plan.DebugString();
  if (model != nullptr && length >= 1 && candidate->plan.Validate(length).ok()) {
    CheckPrediction(*model, candidate->plan, length, documents);
  }
}

}  // namespace
}  // namespace slimfit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace slimfit;  // NOLINT
  fuzz::PlanProtoInput input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return -1;

  absl::StatusOr<performer::ModelConfig> model = planner::ModelConfigFromProto(input.model(), "model");
  if (model.ok()) {
    SLIMFIT_FUZZ_CHECK(model->Validate().ok(), model->Validate().ToString());
    const v1::ModelConfig written = planner::ModelConfigToProto(*model);
    absl::StatusOr<performer::ModelConfig> reread = planner::ModelConfigFromProto(written, "model");
    SLIMFIT_FUZZ_CHECK(reread.ok() && planner::ModelConfigToProto(*reread).SerializeAsString() ==
                                          written.SerializeAsString(),
                       "model round trip: ", written.ShortDebugString());
  } else {
    fuzz::CheckRefusal(model.status(), "model");
  }

  absl::StatusOr<performer::DType> dtype = planner::DTypeFromProto(input.dtype(), "dtype");
  if (dtype.ok()) {
    SLIMFIT_FUZZ_CHECK(planner::DTypeToProto(*dtype) == input.dtype(), "dtype round trip");
  } else {
    fuzz::CheckRefusal(dtype.status(), "dtype");
  }

  // Bounded so that one input stays fast; Predict itself takes any length.
  const int64_t length = std::min<int64_t>(input.sequence_length(), int64_t{1} << 24);
  const int64_t documents = std::max<int64_t>(1, std::min<int64_t>(input.documents(), length));
  const performer::ModelConfig* valid_model = model.ok() ? &*model : nullptr;
  const v1::MemoryPlan& plan = input.memory_plan();
  if (plan.has_chosen()) fuzz::CheckCandidate(plan.chosen(), "chosen", valid_model, length, documents);
  if (plan.has_full_backprop())
    fuzz::CheckCandidate(plan.full_backprop(), "full_backprop", valid_model, length, documents);
  for (int i = 0; i < plan.frontier_size() && i < 8; ++i) {
    fuzz::CheckCandidate(plan.frontier(i), "frontier", valid_model, length, documents);
  }
  (void)planner::PredictionFromProto(plan.chosen().prediction());
  return 0;
}
