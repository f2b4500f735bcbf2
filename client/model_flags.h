// The model-shape flags of the service commands (`slimfit submit`, `slimfit plan --all`):
// --d_model --layers --heads --d_ff --vocab, a feature-map flag, --feature_multiplier and --ln,
// written into a slimfit.v1.ModelConfig. Only the flags given are written, so a field left out
// keeps what a job spec already says or takes the coordinator's default (the defaults Help shows
// are those of proto/slimfit.proto's ModelConfig).
//
// Example:
//   base::FlagSet flags(...);
//   ModelShapeFlags model(flags, "feature_map");
//   ... flags.Parse(args) ...
//   if (model.AnySet()) { if (absl::Status s = model.Apply(spec.mutable_model()->mutable_config()); ...) }
//
// Thread safety: like the base::FlagSet it registers on; must not outlive it.
#ifndef SLIMFIT_CLIENT_MODEL_FLAGS_H_
#define SLIMFIT_CLIENT_MODEL_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/flags.h"
#include "proto/slimfit.pb.h"

namespace slimfit::client {

// "relu", "elu+1", "sqr", "favor+" → FeatureMap; INVALID_ARGUMENT naming --<flag> otherwise.
absl::StatusOr<v1::FeatureMap> ParseFeatureMapFlag(absl::string_view flag, absl::string_view text);

class ModelShapeFlags {
 public:
  // Registers the flags on `flags`; the feature map is --<feature_flag> ("feature_map" for
  // submit; "features" for plan, matching the offline `slimfit plan`).
  ModelShapeFlags(base::FlagSet& flags, absl::string_view feature_flag);
  ModelShapeFlags(const ModelShapeFlags&) = delete;
  ModelShapeFlags& operator=(const ModelShapeFlags&) = delete;

  // After Parse: whether any of these flags was given.
  bool AnySet() const;

  // After Parse: writes the flags given into `*config`, leaving other fields as they are.
  // INVALID_ARGUMENT naming the flag for a count below 1 or an unknown feature map or LayerNorm
  // placement; the full shape is validated by the coordinator.
  [[nodiscard]] absl::Status Apply(v1::ModelConfig* config) const;

 private:
  const base::FlagSet& flags_;
  const std::string feature_flag_;
  int64_t d_model_ = 256;
  int64_t layers_ = 2;
  int64_t heads_ = 4;
  int64_t d_ff_ = 1024;
  int64_t vocab_ = 256;
  std::string feature_map_ = "sqr";
  int64_t feature_multiplier_ = 1;
  std::string ln_ = "post";
};

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_MODEL_FLAGS_H_
