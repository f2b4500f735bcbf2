#include "performer/optimizer_settings.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace slimfit::performer {

int OptimizerSettings::moments() const {
  if (is_adamw()) return 2;
  return momentum > 0 ? 1 : 0;
}

OptimizerSettings OptimizerSettings::AdamW(double learning_rate) {
  OptimizerSettings settings;
  settings.learning_rate = learning_rate;
  return settings;
}

OptimizerSettings OptimizerSettings::Sgd(double learning_rate, double momentum) {
  OptimizerSettings settings;
  settings.kind = Kind::kSgd;
  settings.learning_rate = learning_rate;
  settings.momentum = momentum;
  return settings;
}

absl::Status ValidateOptimizerSettings(const OptimizerSettings& s, absl::string_view field) {
  auto bad = [field](absl::string_view name, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".", name, ": ", why));
  };
  if (!(s.learning_rate > 0) || !std::isfinite(s.learning_rate)) {
    return bad("learning_rate", absl::StrCat("must be > 0, got ", s.learning_rate));
  }
  if (s.warmup_steps < 0) return bad("warmup_steps", absl::StrCat("must be ≥ 0, got ", s.warmup_steps));
  if (!(s.weight_decay >= 0) || !std::isfinite(s.weight_decay)) {
    return bad("weight_decay", absl::StrCat("must be ≥ 0, got ", s.weight_decay));
  }
  if (s.gradient_clip_norm.has_value() &&
      (!(*s.gradient_clip_norm > 0) || !std::isfinite(*s.gradient_clip_norm))) {
    return bad("gradient_clip_norm", absl::StrCat("must be > 0, got ", *s.gradient_clip_norm));
  }
  if (s.is_adamw()) {
    if (!(s.beta1 >= 0 && s.beta1 < 1))
      return bad("adamw.beta1", absl::StrCat("must be in [0, 1), got ", s.beta1));
    if (!(s.beta2 >= 0 && s.beta2 < 1))
      return bad("adamw.beta2", absl::StrCat("must be in [0, 1), got ", s.beta2));
    if (!(s.epsilon > 0)) return bad("adamw.epsilon", absl::StrCat("must be > 0, got ", s.epsilon));
  } else {
    if (!(s.momentum >= 0 && s.momentum < 1)) {
      return bad("sgd.momentum", absl::StrCat("must be in [0, 1), got ", s.momentum));
    }
    if (s.nesterov && s.momentum <= 0) return bad("sgd.nesterov", "needs momentum > 0");
  }
  return absl::OkStatus();
}

int64_t LocalStepsExtraBytes(const OptimizerSettings& inner, int64_t parameter_bytes,
                             TensorEncoding pseudo_gradients) {
  const bool lossy = pseudo_gradients != TensorEncoding::kExact;
  return parameter_bytes * (2 + inner.moments()) + (lossy ? parameter_bytes + parameter_bytes / 2 : 0);
}

}  // namespace slimfit::performer
