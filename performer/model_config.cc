#include "performer/model_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace slimfit::performer {

absl::string_view FeatureMapName(FeatureMap map) {
  switch (map) {
    case FeatureMap::kRelu:
      return "relu";
    case FeatureMap::kElu1:
      return "elu+1";
    case FeatureMap::kSqr:
      return "sqr";
    case FeatureMap::kFavor:
      return "favor+";
  }
  return "unknown";
}

absl::StatusOr<FeatureMap> ParseFeatureMap(absl::string_view name) {
  if (name == "relu") return FeatureMap::kRelu;
  if (name == "elu+1" || name == "elu") return FeatureMap::kElu1;
  if (name == "sqr") return FeatureMap::kSqr;
  if (name == "favor+" || name == "favor") return FeatureMap::kFavor;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown feature map '", name, "'; expected one of relu, elu+1, sqr, favor+"));
}

absl::string_view LayerNormPlacementName(LayerNormPlacement ln) {
  return ln == LayerNormPlacement::kPost ? "post" : "pre";
}

absl::StatusOr<LayerNormPlacement> ParseLayerNormPlacement(absl::string_view name) {
  if (name == "post") return LayerNormPlacement::kPost;
  if (name == "pre") return LayerNormPlacement::kPre;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown LayerNorm placement '", name, "'; expected post or pre"));
}

int64_t ModelConfig::parameter_count() const {
  const int64_t attention = 3 * (d_model * d_model + d_model);
  const int64_t ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model;
  const int64_t norms = 4 * d_model;
  const int64_t per_layer = attention + ffn + norms;
  return vocab * (d_model / 2) + layers * per_layer + d_model * vocab + vocab;
}

int64_t ModelConfig::forward_layout_values(bool copy_all) const {
  const int64_t fused = layers * 3 * d_model * (d_model + 1);
  return copy_all ? fused + layers * 2 * d_model * d_ff + d_model * vocab : fused;
}

int64_t ModelConfig::product_weight_values() const {
  return layers * (3 * d_model * d_model + 2 * d_model * d_ff) + d_model * vocab;
}

absl::Status ModelConfig::Validate() const {
  auto positive = [](absl::string_view field, int64_t value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, " must be positive, got ", value));
  };
  for (auto [field, value] : {std::pair<absl::string_view, int64_t>{"vocab", vocab},
                              {"d_model", d_model},
                              {"layers", layers},
                              {"heads", heads},
                              {"d_ff", d_ff},
                              {"feature_multiplier", feature_multiplier}}) {
    if (absl::Status s = positive(field, value); !s.ok()) return s;
  }
  if (d_model % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("d_model must be divisible by 4 (half token embedding, a quarter each of sin and cos "
                     "positions), got ",
                     d_model));
  }
  if (d_model % heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("d_model (%d) must be divisible by heads (%d)", d_model, heads));
  }
  if (feature_multiplier != 1 && feature_map != FeatureMap::kFavor) {
    return absl::InvalidArgumentError(
        absl::StrCat("feature_multiplier ", feature_multiplier, " needs the favor+ feature map; ",
                     FeatureMapName(feature_map), " has exactly head_dim features"));
  }
  // Keep sizes sane so a typo cannot ask for petabytes.
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  if (vocab > kMaxDim || d_model > kMaxDim || d_ff > kMaxDim || layers > 4096 || feature_multiplier > 64) {
    return absl::InvalidArgumentError(absl::StrCat("model is implausibly large: ", DebugString()));
  }
  return absl::OkStatus();
}

std::string ModelConfig::DebugString() const {
  return absl::StrFormat("vocab=%d d_model=%d layers=%d heads=%d d_ff=%d features=%s%s ln=%s", vocab, d_model,
                         layers, heads, d_ff, FeatureMapName(feature_map),
                         feature_multiplier == 1 ? "" : absl::StrCat("x", feature_multiplier),
                         LayerNormPlacementName(layernorm));
}

}  // namespace slimfit::performer
