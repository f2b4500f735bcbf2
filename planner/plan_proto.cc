#include "planner/plan_proto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace slimfit::planner {
namespace {

using performer::DType;
using performer::FeatureMap;
using performer::FrontPolicy;
using performer::LayerNormPlacement;
using performer::LayerRecompute;
using performer::ModelConfig;
using performer::Plan;
using performer::PrefixMode;
using performer::ScheduleKind;

absl::Status Unspecified(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what, " is required (UNSPECIFIED given)"));
}

v1::FeatureMap FeatureMapToProto(FeatureMap map) {
  switch (map) {
    case FeatureMap::kRelu:
      return v1::FEATURE_MAP_RELU;
    case FeatureMap::kElu1:
      return v1::FEATURE_MAP_ELU1;
    case FeatureMap::kSqr:
      return v1::FEATURE_MAP_SQR;
    case FeatureMap::kFavor:
      return v1::FEATURE_MAP_FAVOR;
  }
  return v1::FEATURE_MAP_UNSPECIFIED;
}

absl::StatusOr<FeatureMap> FeatureMapFromProto(v1::FeatureMap map, absl::string_view field) {
  switch (map) {
    case v1::FEATURE_MAP_RELU:
      return FeatureMap::kRelu;
    case v1::FEATURE_MAP_ELU1:
      return FeatureMap::kElu1;
    case v1::FEATURE_MAP_SQR:
      return FeatureMap::kSqr;
    case v1::FEATURE_MAP_FAVOR:
      return FeatureMap::kFavor;
    default:
      return Unspecified(field, "a feature map");
  }
}

v1::ScheduleKind ScheduleToProto(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kHsm:
      return v1::SCHEDULE_KIND_HSM;
    case ScheduleKind::kIsm:
      return v1::SCHEDULE_KIND_ISM;
    case ScheduleKind::kMsm:
      return v1::SCHEDULE_KIND_MSM;
  }
  return v1::SCHEDULE_KIND_UNSPECIFIED;
}

}  // namespace

v1::ModelConfig ModelConfigToProto(const ModelConfig& config) {
  v1::ModelConfig proto;
  proto.set_vocab(config.vocab);
  proto.set_d_model(config.d_model);
  proto.set_layers(config.layers);
  proto.set_heads(config.heads);
  proto.set_d_ff(config.d_ff);
  proto.set_feature_map(FeatureMapToProto(config.feature_map));
  proto.set_feature_multiplier(config.feature_multiplier);
  proto.set_layernorm(config.layernorm == LayerNormPlacement::kPre ? v1::LAYER_NORM_PLACEMENT_PRE
                                                                   : v1::LAYER_NORM_PLACEMENT_POST);
  return proto;
}

absl::StatusOr<ModelConfig> ModelConfigFromProto(const v1::ModelConfig& proto, absl::string_view field) {
  ModelConfig config;
  if (proto.has_vocab()) config.vocab = proto.vocab();
  if (proto.has_d_model()) config.d_model = proto.d_model();
  if (proto.has_layers()) config.layers = proto.layers();
  if (proto.has_heads()) config.heads = proto.heads();
  if (proto.has_d_ff()) config.d_ff = proto.d_ff();
  if (proto.has_feature_map()) {
    absl::StatusOr<FeatureMap> map =
        FeatureMapFromProto(proto.feature_map(), absl::StrCat(field, ".feature_map"));
    if (!map.ok()) return map.status();
    config.feature_map = *map;
  } else {
    config.feature_map = FeatureMap::kSqr;
  }
  if (proto.has_feature_multiplier()) config.feature_multiplier = proto.feature_multiplier();
  if (proto.has_layernorm()) {
    switch (proto.layernorm()) {
      case v1::LAYER_NORM_PLACEMENT_POST:
        config.layernorm = LayerNormPlacement::kPost;
        break;
      case v1::LAYER_NORM_PLACEMENT_PRE:
        config.layernorm = LayerNormPlacement::kPre;
        break;
      default:
        return Unspecified(absl::StrCat(field, ".layernorm"), "a layer-norm placement");
    }
  }
  if (config.vocab > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".vocab: ", config.vocab, " is above 2^31"));
  }
  if (absl::Status valid = config.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", valid.message()));
  }
  return config;
}

v1::DType DTypeToProto(DType dtype) {
  return dtype == DType::kFloat64 ? v1::DTYPE_FLOAT64 : v1::DTYPE_FLOAT32;
}

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return DType::kFloat32;
    case v1::DTYPE_FLOAT64:
      return DType::kFloat64;
    default:
      return Unspecified(field, "a dtype");
  }
}

v1::Plan PlanToProto(const Plan& plan) {
  v1::Plan proto;
  proto.set_slice(plan.slice);
  if (plan.slice > 0) {
    proto.set_prefix_mode(plan.prefix_mode == PrefixMode::kCumsum ? v1::PREFIX_MODE_CUMSUM
                                                                  : v1::PREFIX_MODE_CHUNKED);
    if (plan.prefix_mode == PrefixMode::kChunked) proto.set_block(plan.block);
    switch (plan.front_policy) {
      case FrontPolicy::kReverse:
        proto.set_front_policy(v1::FRONT_POLICY_REVERSE);
        break;
      case FrontPolicy::kStore:
        proto.set_front_policy(v1::FRONT_POLICY_STORE);
        break;
      case FrontPolicy::kResync:
        proto.set_front_policy(v1::FRONT_POLICY_RESYNC);
        proto.set_resync_every(plan.resync_every);
        break;
      case FrontPolicy::kDp:
        proto.set_front_policy(v1::FRONT_POLICY_DP);
        proto.set_schedule(ScheduleToProto(plan.schedule));
        proto.set_slots(plan.slots);
        if (plan.schedule == ScheduleKind::kMsm) {
          proto.set_alpha(plan.alpha);
          proto.set_beta(plan.beta);
        }
        break;
    }
    proto.set_recompute(plan.recompute == LayerRecompute::kLayers ? v1::LAYER_RECOMPUTE_LAYERS
                                                                  : v1::LAYER_RECOMPUTE_NONE);
  }
  proto.set_dtype(DTypeToProto(plan.dtype));
  proto.set_threads(plan.threads);
  if (!plan.copy_forward_weights) proto.set_copy_forward_weights(false);
  proto.set_bf16_products(plan.bf16_products);
  proto.set_predicted_peak_bytes(plan.predicted_peak_bytes);
  proto.set_predicted_time_seconds(plan.predicted_time_s);
  proto.set_reason(plan.reason);
  return proto;
}

absl::StatusOr<Plan> PlanFromProto(const v1::Plan& proto, absl::string_view field) {
  Plan plan;
  plan.slice = proto.slice();
  if (plan.slice > 0) {
    switch (proto.prefix_mode()) {
      case v1::PREFIX_MODE_CUMSUM:
        plan.prefix_mode = PrefixMode::kCumsum;
        break;
      case v1::PREFIX_MODE_CHUNKED:
        plan.prefix_mode = PrefixMode::kChunked;
        break;
      default:
        return Unspecified(absl::StrCat(field, ".prefix_mode"), "a prefix mode");
    }
    plan.block = proto.block();
    switch (proto.front_policy()) {
      case v1::FRONT_POLICY_REVERSE:
        plan.front_policy = FrontPolicy::kReverse;
        break;
      case v1::FRONT_POLICY_STORE:
        plan.front_policy = FrontPolicy::kStore;
        break;
      case v1::FRONT_POLICY_RESYNC:
        plan.front_policy = FrontPolicy::kResync;
        break;
      case v1::FRONT_POLICY_DP:
        plan.front_policy = FrontPolicy::kDp;
        break;
      default:
        return Unspecified(absl::StrCat(field, ".front_policy"), "a front policy");
    }
    plan.resync_every = proto.resync_every();
    if (plan.front_policy == FrontPolicy::kDp) {
      switch (proto.schedule()) {
        case v1::SCHEDULE_KIND_HSM:
          plan.schedule = ScheduleKind::kHsm;
          break;
        case v1::SCHEDULE_KIND_ISM:
          plan.schedule = ScheduleKind::kIsm;
          break;
        case v1::SCHEDULE_KIND_MSM:
          plan.schedule = ScheduleKind::kMsm;
          break;
        default:
          return Unspecified(absl::StrCat(field, ".schedule"), "a schedule for front_policy dp");
      }
    }
    plan.slots = proto.slots();
    plan.alpha = proto.alpha();
    plan.beta = proto.beta();
  }
  switch (proto.recompute()) {
    case v1::LAYER_RECOMPUTE_UNSPECIFIED:
    case v1::LAYER_RECOMPUTE_NONE:
      plan.recompute = LayerRecompute::kNone;
      break;
    case v1::LAYER_RECOMPUTE_LAYERS:
      plan.recompute = LayerRecompute::kLayers;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(field, ".recompute: unknown value ", proto.recompute()));
  }
  absl::StatusOr<DType> dtype = DTypeFromProto(proto.dtype(), absl::StrCat(field, ".dtype"));
  if (!dtype.ok()) return dtype.status();
  plan.dtype = *dtype;
  if (proto.threads() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".threads: must be ≥ 0, got ", proto.threads()));
  }
  plan.threads = proto.threads();
  plan.copy_forward_weights = !proto.has_copy_forward_weights() || proto.copy_forward_weights();
  if (proto.bf16_products() && plan.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".bf16_products: ", performer::Bf16ProductsDTypeError(plan.dtype)));
  }
  plan.bf16_products = proto.bf16_products();
  plan.predicted_peak_bytes = proto.predicted_peak_bytes();
  plan.predicted_time_s = proto.predicted_time_seconds();
  plan.reason = proto.reason();
  return plan;
}

v1::Prediction PredictionToProto(const Prediction& prediction) {
  v1::Prediction proto;
  proto.set_parameter_bytes(prediction.parameter_bytes);
  proto.set_gradient_bytes(prediction.gradient_bytes);
  proto.set_optimizer_bytes(prediction.optimizer_bytes);
  proto.set_kept_bytes(prediction.kept_bytes);
  proto.set_working_bytes(prediction.working_bytes);
  proto.set_resident_bytes(prediction.resident_bytes);
  proto.set_graph_pool_bytes(prediction.graph_pool_bytes);
  proto.set_peak_bytes(prediction.peak_bytes);
  proto.set_seconds(prediction.seconds);
  proto.set_slice_forwards(prediction.slice_forwards);
  return proto;
}

Prediction PredictionFromProto(const v1::Prediction& proto) {
  Prediction prediction;
  prediction.parameter_bytes = proto.parameter_bytes();
  prediction.gradient_bytes = proto.gradient_bytes();
  prediction.optimizer_bytes = proto.optimizer_bytes();
  prediction.kept_bytes = proto.kept_bytes();
  prediction.working_bytes = proto.working_bytes();
  prediction.resident_bytes = proto.resident_bytes();
  prediction.graph_pool_bytes = proto.graph_pool_bytes();
  prediction.peak_bytes = proto.peak_bytes();
  prediction.seconds = proto.seconds();
  prediction.slice_forwards = proto.slice_forwards();
  return prediction;
}

v1::PlanCandidate CandidateToProto(const PlanCandidate& candidate) {
  v1::PlanCandidate proto;
  *proto.mutable_plan() = PlanToProto(candidate.plan);
  *proto.mutable_prediction() = PredictionToProto(candidate.prediction);
  return proto;
}

absl::StatusOr<PlanCandidate> CandidateFromProto(const v1::PlanCandidate& proto, absl::string_view field) {
  absl::StatusOr<Plan> plan = PlanFromProto(proto.plan(), absl::StrCat(field, ".plan"));
  if (!plan.ok()) return plan.status();
  PlanCandidate candidate;
  candidate.plan = *std::move(plan);
  candidate.prediction = PredictionFromProto(proto.prediction());
  return candidate;
}

v1::Objective ObjectiveToProto(Objective objective) {
  return objective == Objective::kMemory ? v1::OBJECTIVE_MEMORY : v1::OBJECTIVE_TIME;
}

Objective ObjectiveFromProto(v1::Objective objective) {
  return objective == v1::OBJECTIVE_MEMORY ? Objective::kMemory : Objective::kTime;
}

absl::StatusOr<v1::MemoryPlan> SearchMemoryPlan(const PlanSearchRequest& request,
                                                const DeviceProfile& profile, bool include_frontier) {
  v1::MemoryPlan plan;
  plan.set_memory_budget_bytes(request.memory_budget_bytes);
  plan.set_usable_bytes(static_cast<int64_t>(
      std::floor(static_cast<double>(request.memory_budget_bytes) * (1.0 - request.safety_margin))));
  plan.set_sequence_length(request.workload.seq_len);
  plan.set_documents(request.workload.documents);
  plan.set_objective(ObjectiveToProto(request.objective));

  absl::StatusOr<PlanSearchResult> result = SearchPlans(request, profile);
  if (result.ok()) {
    *plan.mutable_chosen() = CandidateToProto(result->chosen);
    *plan.mutable_full_backprop() = CandidateToProto(result->full_backprop);
    plan.set_reason(result->reason);
    plan.set_candidates_considered(result->candidates_considered);
    if (include_frontier) {
      const std::vector<PlanCandidate>& frontier = result->frontier;
      const size_t limit = static_cast<size_t>(v1::LIMIT_MAX_FRONTIER);
      if (frontier.size() <= limit) {
        for (const PlanCandidate& candidate : frontier) *plan.add_frontier() = CandidateToProto(candidate);
      } else {
        // Evenly in peak bytes: for each of `limit` targets from the least to the largest peak,
        // the first entry at or above it (the frontier is sorted by peak); duplicates dropped.
        const double low = static_cast<double>(frontier.front().prediction.peak_bytes);
        const double high = static_cast<double>(frontier.back().prediction.peak_bytes);
        size_t previous = frontier.size();
        size_t index = 0;
        for (size_t i = 0; i < limit; ++i) {
          const double target = low + (high - low) * static_cast<double>(i) / static_cast<double>(limit - 1);
          while (index + 1 < frontier.size() &&
                 static_cast<double>(frontier[index].prediction.peak_bytes) < target) {
            ++index;
          }
          if (i + 1 == limit) index = frontier.size() - 1;
          if (index == previous) continue;
          *plan.add_frontier() = CandidateToProto(frontier[index]);
          previous = index;
        }
      }
    }
    return plan;
  }
  if (result.status().code() != absl::StatusCode::kResourceExhausted) return result.status();

  // Refused: find what the least plan needs, without a budget.
  PlanSearchRequest unbounded = request;
  unbounded.memory_budget_bytes = std::numeric_limits<int64_t>::max() / 4;
  unbounded.safety_margin = 0;
  unbounded.objective = Objective::kMemory;
  absl::StatusOr<PlanSearchResult> least = SearchPlans(unbounded, profile);
  if (!least.ok()) return least.status();
  *plan.mutable_full_backprop() = CandidateToProto(least->full_backprop);
  plan.set_candidates_considered(least->candidates_considered);
  plan.set_refusal(std::string(result.status().message()));
  plan.set_reason(std::string(result.status().message()));
  plan.set_least_peak_bytes(least->chosen.prediction.peak_bytes);
  return plan;
}

std::string PlanSummary(const Plan& plan) {
  if (plan.slice == 0)
    return plan.bf16_products ? "full back-propagation, bfloat16 products" : "full back-propagation";
  std::string summary = absl::StrCat("C = ", plan.slice, ", ", performer::PrefixModeName(plan.prefix_mode));
  if (plan.prefix_mode == PrefixMode::kChunked) absl::StrAppend(&summary, "/", plan.block);
  absl::StrAppend(&summary, ", ", performer::FrontPolicyName(plan.front_policy));
  if (plan.front_policy == FrontPolicy::kResync) absl::StrAppend(&summary, "/", plan.resync_every);
  if (plan.front_policy == FrontPolicy::kDp) {
    absl::StrAppend(&summary, "/", ScheduleKindName(plan.schedule), "/", plan.slots);
  }
  if (plan.recompute == LayerRecompute::kLayers) absl::StrAppend(&summary, ", recompute layers");
  if (!plan.copy_forward_weights) absl::StrAppend(&summary, ", one weight layout");
  if (plan.bf16_products) absl::StrAppend(&summary, ", bfloat16 products");
  return summary;
}

std::string PlanSummaryOf(const v1::Plan& plan) {
  absl::StatusOr<performer::Plan> read = PlanFromProto(plan, "plan");
  if (!read.ok())
    return absl::StrCat("C = ", plan.slice(), " (unreadable plan: ", read.status().message(), ")");
  return PlanSummary(*read);
}

}  // namespace slimfit::planner
