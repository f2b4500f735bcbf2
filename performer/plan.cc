#include "performer/plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace slimfit::performer {

absl::string_view PrefixModeName(PrefixMode mode) {
  return mode == PrefixMode::kCumsum ? "cumsum" : "chunked";
}

absl::StatusOr<PrefixMode> ParsePrefixMode(absl::string_view name) {
  if (name == "cumsum") return PrefixMode::kCumsum;
  if (name == "chunked") return PrefixMode::kChunked;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown prefix mode '", name, "'; expected cumsum or chunked"));
}

absl::string_view FrontPolicyName(FrontPolicy policy) {
  switch (policy) {
    case FrontPolicy::kReverse:
      return "reverse";
    case FrontPolicy::kStore:
      return "store";
    case FrontPolicy::kResync:
      return "resync";
    case FrontPolicy::kDp:
      return "dp";
  }
  return "unknown";
}

absl::StatusOr<FrontPolicy> ParseFrontPolicy(absl::string_view name) {
  if (name == "reverse") return FrontPolicy::kReverse;
  if (name == "store") return FrontPolicy::kStore;
  if (name == "resync") return FrontPolicy::kResync;
  if (name == "dp") return FrontPolicy::kDp;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown front policy '", name, "'; expected reverse, store, resync or dp"));
}

absl::string_view LayerRecomputeName(LayerRecompute recompute) {
  return recompute == LayerRecompute::kNone ? "none" : "layers";
}

absl::StatusOr<LayerRecompute> ParseLayerRecompute(absl::string_view name) {
  if (name == "none") return LayerRecompute::kNone;
  if (name == "layers") return LayerRecompute::kLayers;
  return absl::InvalidArgumentError(absl::StrCat("unknown recompute '", name, "'; expected none or layers"));
}

absl::string_view DTypeName(DType dtype) { return dtype == DType::kFloat32 ? "float32" : "float64"; }

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "float32" || name == "f32") return DType::kFloat32;
  if (name == "float64" || name == "f64") return DType::kFloat64;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'; expected float32 or float64"));
}

int64_t DTypeBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 8; }

std::string Bf16ProductsDTypeError(DType dtype) {
  return absl::StrCat("bfloat16 products need dtype float32 (the float32 values they round), not ",
                      DTypeName(dtype));
}

absl::Status Plan::Validate(int64_t seq_len) const {
  if (seq_len <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence must hold at least one token, got ", seq_len));
  }
  if (slice < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice size C must be at least 1 (or 0 for full back-propagation), got ", slice));
  }
  if (slice > seq_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "slice size C = %d exceeds the sequence length L = %d; choose 1 <= C <= L", slice, seq_len));
  }
  if (prefix_mode == PrefixMode::kChunked && block <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunked prefix mode needs a positive block size, got ", block));
  }
  if (front_policy == FrontPolicy::kResync && resync_every <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("front policy resync needs resync_every >= 1, got ", resync_every));
  }
  if (front_policy == FrontPolicy::kDp) {
    if (slots < 1) {
      return absl::InvalidArgumentError(absl::StrCat("front policy dp needs slots >= 1, got ", slots));
    }
    if (schedule == ScheduleKind::kMsm && !(alpha >= 1 && beta > 0 && beta <= alpha)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dp with the msm program needs slice-graph sizes 1 <= alpha and 0 < beta <= alpha (in "
          "fronts), got alpha=%g beta=%g",
          alpha, beta));
    }
  }
  if (recompute == LayerRecompute::kLayers && slice == 0) {
    return absl::InvalidArgumentError(
        "layer recomputation applies to sliced plans; use slice = L for one slice over the whole sequence");
  }
  if (threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be >= 0, got ", threads));
  }
  if (bf16_products && dtype != DType::kFloat32)
    return absl::InvalidArgumentError(Bf16ProductsDTypeError(dtype));
  return absl::OkStatus();
}

std::string Plan::DebugString() const {
  std::string text = absl::StrFormat("slice=%s prefix=%s", slice == 0 ? "full" : absl::StrCat(slice),
                                     PrefixModeName(prefix_mode));
  if (prefix_mode == PrefixMode::kChunked) absl::StrAppend(&text, " block=", block);
  absl::StrAppend(&text, " front=", FrontPolicyName(front_policy));
  if (front_policy == FrontPolicy::kResync) absl::StrAppend(&text, " resync_every=", resync_every);
  if (front_policy == FrontPolicy::kDp) {
    absl::StrAppend(&text, " schedule=", ScheduleKindName(schedule), " slots=", slots);
    if (schedule == ScheduleKind::kMsm) absl::StrAppendFormat(&text, " alpha=%g beta=%g", alpha, beta);
  }
  if (recompute != LayerRecompute::kNone)
    absl::StrAppend(&text, " recompute=", LayerRecomputeName(recompute));
  absl::StrAppend(&text, " dtype=", DTypeName(dtype));
  if (threads > 0) absl::StrAppend(&text, " threads=", threads);
  if (!copy_forward_weights) absl::StrAppend(&text, " one_weight_layout");
  if (bf16_products) absl::StrAppend(&text, " bf16_products");
  return text;
}

}  // namespace slimfit::performer
