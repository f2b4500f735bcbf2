#include "client/model_flags.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace slimfit::client {

absl::StatusOr<v1::FeatureMap> ParseFeatureMapFlag(absl::string_view flag, absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "relu") return v1::FEATURE_MAP_RELU;
  if (lower == "elu+1" || lower == "elu1") return v1::FEATURE_MAP_ELU1;
  if (lower == "sqr") return v1::FEATURE_MAP_SQR;
  if (lower == "favor+" || lower == "favor") return v1::FEATURE_MAP_FAVOR;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", text, ": unknown feature map; expected relu, elu+1, sqr or favor+"));
}

ModelShapeFlags::ModelShapeFlags(base::FlagSet& flags, absl::string_view feature_flag)
    : flags_(flags), feature_flag_(feature_flag) {
  flags.Int("d_model", &d_model_, "model width (divisible by 4 and by --heads)");
  flags.Int("layers", &layers_, "layers");
  flags.Int("heads", &heads_, "attention heads");
  flags.Int("d_ff", &d_ff_, "feed-forward width");
  flags.Int("vocab", &vocab_, "vocabulary size (256: bytes are tokens)");
  flags.String(feature_flag, &feature_map_, "feature map: relu, elu+1, sqr or favor+");
  flags.Int("feature_multiplier", &feature_multiplier_,
            "favor+: features per head in multiples of the head width");
  flags.String("ln", &ln_, "LayerNorm after (post) or before (pre) each sub-layer");
}

bool ModelShapeFlags::AnySet() const {
  for (absl::string_view name : {"d_model", "layers", "heads", "d_ff", "vocab", "feature_multiplier", "ln"}) {
    if (flags_.IsSet(name)) return true;
  }
  return flags_.IsSet(feature_flag_);
}

absl::Status ModelShapeFlags::Apply(v1::ModelConfig* config) const {
  struct Count {
    const char* name;
    int64_t value;
    void (v1::ModelConfig::*set)(int64_t);
  };
  const Count counts[] = {
      {"d_model", d_model_, &v1::ModelConfig::set_d_model},
      {"layers", layers_, &v1::ModelConfig::set_layers},
      {"heads", heads_, &v1::ModelConfig::set_heads},
      {"d_ff", d_ff_, &v1::ModelConfig::set_d_ff},
      {"vocab", vocab_, &v1::ModelConfig::set_vocab},
      {"feature_multiplier", feature_multiplier_, &v1::ModelConfig::set_feature_multiplier},
  };
  for (const Count& count : counts) {
    if (!flags_.IsSet(count.name)) continue;
    if (count.value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", count.name, "=", count.value, ": expected a positive integer"));
    }
    (config->*count.set)(count.value);
  }
  if (flags_.IsSet(feature_flag_)) {
    absl::StatusOr<v1::FeatureMap> feature_map = ParseFeatureMapFlag(feature_flag_, feature_map_);
    if (!feature_map.ok()) return feature_map.status();
    config->set_feature_map(*feature_map);
  }
  if (flags_.IsSet("ln")) {
    const std::string ln = absl::AsciiStrToLower(ln_);
    if (ln == "post") {
      config->set_layernorm(v1::LAYER_NORM_PLACEMENT_POST);
    } else if (ln == "pre") {
      config->set_layernorm(v1::LAYER_NORM_PLACEMENT_PRE);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--ln=", ln_, ": expected post or pre"));
    }
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
