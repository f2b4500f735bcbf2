#include "wire/engine_settings.h"

#include "absl/strings/str_cat.h"

namespace slimfit::wire {

absl::StatusOr<performer::OptimizerSettings> OptimizerSettingsFromProto(const v1::Optimizer& optimizer,
                                                                        absl::string_view field) {
  if (optimizer.kind_case() == v1::Optimizer::KIND_NOT_SET) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".kind: set adamw or sgd"));
  }
  if (!optimizer.has_learning_rate()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field,
        ".learning_rate: ", optimizer.has_sgd() ? "required for SGD (it has no default)" : "required"));
  }
  performer::OptimizerSettings settings = OptimizerSettingsOf(optimizer);
  if (absl::Status valid = performer::ValidateOptimizerSettings(settings, field); !valid.ok()) return valid;
  return settings;
}

performer::OptimizerSettings OptimizerSettingsOf(const v1::Optimizer& optimizer) {
  performer::OptimizerSettings settings;
  if (optimizer.has_learning_rate()) settings.learning_rate = optimizer.learning_rate();
  settings.warmup_steps = optimizer.warmup_steps();
  settings.weight_decay = optimizer.weight_decay();
  if (optimizer.has_gradient_clip_norm()) settings.gradient_clip_norm = optimizer.gradient_clip_norm();
  if (!optimizer.has_sgd()) {
    const v1::AdamW& a = optimizer.adamw();
    settings.kind = performer::OptimizerSettings::Kind::kAdamW;
    if (a.has_beta1()) settings.beta1 = a.beta1();
    if (a.has_beta2()) settings.beta2 = a.beta2();
    if (a.has_epsilon()) settings.epsilon = a.epsilon();
  } else {
    settings.kind = performer::OptimizerSettings::Kind::kSgd;
    settings.momentum = optimizer.sgd().momentum();
    settings.nesterov = optimizer.sgd().nesterov();
  }
  return settings;
}

absl::Status ValidateOptimizer(const v1::Optimizer& optimizer, absl::string_view field) {
  return OptimizerSettingsFromProto(optimizer, field).status();
}

performer::TensorEncoding TensorEncodingFromProto(v1::Compression compression) {
  switch (compression) {
    case v1::COMPRESSION_FLOAT16:
      return performer::TensorEncoding::kFloat16;
    case v1::COMPRESSION_BFLOAT16:
      return performer::TensorEncoding::kBfloat16;
    case v1::COMPRESSION_INT8:
      return performer::TensorEncoding::kInt8;
    default:
      return performer::TensorEncoding::kExact;
  }
}

}  // namespace slimfit::wire
