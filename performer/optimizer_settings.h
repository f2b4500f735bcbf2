// The engine's own description of an optimizer and of how a local-steps worker's pseudo-gradient
// travels: what performer::Trainer steps with and what the memory accounting of local steps counts.
// The engine never sees a protocol message; wire/engine_settings.h builds these from a job's
// slimfit.v1.Optimizer and Compression (the one place the two meet) and names the job's fields in
// its errors.
//
// Learning rate of step t (1-based): learning_rate · min(1, t / warmup_steps) (constant without
// warm-up). Clipping follows torch.nn.utils.clip_grad_norm_: scale by max / (norm + 1e-6) when
// that is below 1. AdamW is torch::optim::AdamW (decoupled weight decay); SGD is torch::optim::SGD
// (weight decay as an L2 term).
//
// Thread safety: plain values and pure functions.
#ifndef SLIMFIT_PERFORMER_OPTIMIZER_SETTINGS_H_
#define SLIMFIT_PERFORMER_OPTIMIZER_SETTINGS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace slimfit::performer {

struct OptimizerSettings {
  enum class Kind { kAdamW, kSgd };
  Kind kind = Kind::kAdamW;
  double learning_rate = 3e-4;               // > 0
  int64_t warmup_steps = 0;                  // ≥ 0; 0: no warm-up
  double weight_decay = 0;                   // ≥ 0
  std::optional<double> gradient_clip_norm;  // > 0; absent: no clipping
  // AdamW only.
  double beta1 = 0.9;     // [0, 1)
  double beta2 = 0.999;   // [0, 1)
  double epsilon = 1e-8;  // > 0
  // SGD only.
  double momentum = 0;    // [0, 1)
  bool nesterov = false;  // needs momentum > 0

  bool is_adamw() const { return kind == Kind::kAdamW; }
  // Moment tensors the optimizer keeps per parameter: AdamW 2, SGD with momentum 1, plain SGD 0.
  int moments() const;

  static OptimizerSettings AdamW(double learning_rate);
  static OptimizerSettings Sgd(double learning_rate, double momentum = 0);
};

// INVALID_ARGUMENT naming the first value out of its range as `field` + "." + its name, e.g.
// "spec.optimizer.adamw.beta1: must be in [0, 1), got 1" (the names of the job's fields).
absl::Status ValidateOptimizerSettings(const OptimizerSettings& settings,
                                       absl::string_view field = "optimizer");

// How a tensor travels: exactly, or in one of the protocol's lossy encodings (with error feedback
// kept by the sender).
enum class TensorEncoding { kExact, kFloat16, kBfloat16, kInt8 };

// Bytes a worker holds beside a round's parameters while it takes local steps with `inner`: its own
// copy of the parameters, the model each inner step is computed at, and the optimizer's moments,
// each `parameter_bytes`; with a lossy `pseudo_gradients` encoding also the error feedback (float32:
// `parameter_bytes` for float32 parameters) and the encoded pseudo-gradient (at most half of it).
int64_t LocalStepsExtraBytes(const OptimizerSettings& inner, int64_t parameter_bytes,
                             TensorEncoding pseudo_gradients = TensorEncoding::kExact);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_OPTIMIZER_SETTINGS_H_
