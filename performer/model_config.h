// ModelConfig: the shape of a causal Performer language model, free of LibTorch so the planner, the
// CLI and the service can reason about models without linking the engine.
//
// Example:
//   ModelConfig config;
//   config.d_model = 256; config.layers = 2; config.heads = 4; config.d_ff = 1024;
//   config.feature_map = FeatureMap::kSqr;
//   if (absl::Status s = config.Validate(); !s.ok()) return s;
//
// Thread safety: a plain value type.
#ifndef SLIMFIT_PERFORMER_MODEL_CONFIG_H_
#define SLIMFIT_PERFORMER_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit::performer {

// The positive map g applied to queries and keys (Likhosherstov et al., eq. 1).
enum class FeatureMap {
  kRelu,   // relu(x)
  kElu1,   // elu(x) + 1
  kSqr,    // x * x, elementwise (the seed's experiments)
  kFavor,  // FAVOR+ positive random features: exp(w·x' − |x'|²/2), x' = x·d^(-1/4)
};

// Where each LayerNorm sits relative to its sub-layer.
enum class LayerNormPlacement {
  kPost,  // x + LN(sublayer(x)): the reference implementation's default
  kPre,   // x + sublayer(LN(x))
};

absl::string_view FeatureMapName(FeatureMap map);                    // "relu", "elu+1", "sqr", "favor+"
absl::StatusOr<FeatureMap> ParseFeatureMap(absl::string_view name);  // accepts the names above
absl::string_view LayerNormPlacementName(LayerNormPlacement ln);     // "post", "pre"
absl::StatusOr<LayerNormPlacement> ParseLayerNormPlacement(absl::string_view name);

struct ModelConfig {
  int64_t vocab = 256;    // byte-level by default
  int64_t d_model = 256;  // must be divisible by 4 (embedding/positions) and by heads
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t d_ff = 1024;
  FeatureMap feature_map = FeatureMap::kSqr;
  // M = feature_multiplier · head_dim features per head. Only favor+ may use more than 1.
  int64_t feature_multiplier = 1;
  LayerNormPlacement layernorm = LayerNormPlacement::kPost;

  int64_t head_dim() const { return d_model / heads; }
  int64_t features_per_head() const { return feature_multiplier * head_dim(); }
  // Floats in one layer's front: numerator k·M·d plus denominator k·M.
  int64_t front_elements_per_layer() const { return heads * features_per_head() * (head_dim() + 1); }
  int64_t parameter_count() const;
  // Values of the copies the gradient engine makes of the weights for its forward products
  // (PrepareForwardLayouts, performer_model.h): q | k | v fused per layer, and with `copy_all` a
  // contiguous copy of the FFN and output weights.
  int64_t forward_layout_values(bool copy_all) const;
  // Values of the linear maps' weights (q, k, v, the FFN's two, the output map): what the engine's
  // bfloat16 copies for bfloat16 products hold (PrepareForwardLayouts, performer_model.h).
  int64_t product_weight_values() const;

  // INVALID_ARGUMENT naming the offending field when the shape is impossible.
  absl::Status Validate() const;
  std::string DebugString() const;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_MODEL_CONFIG_H_
