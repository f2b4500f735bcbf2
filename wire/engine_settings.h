// The engine's settings from a job's messages: slimfit.v1.Optimizer → performer::OptimizerSettings
// and slimfit.v1.Compression → performer::TensorEncoding. The one place the two meet; the engine
// (performer/) never includes the wire schema.
//
// Thread safety: pure functions.
#ifndef SLIMFIT_WIRE_ENGINE_SETTINGS_H_
#define SLIMFIT_WIRE_ENGINE_SETTINGS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "performer/optimizer_settings.h"
#include "proto/slimfit.pb.h"

namespace slimfit::wire {

// The optimizer `optimizer` describes, its unset AdamW fields at their documented defaults
// (jobs.proto). INVALID_ARGUMENT naming the field as `field` + "." + its name (e.g.
// "spec.optimizer.kind: set adamw or sgd"): no kind, no learning rate (required: the job's defaults
// fill it in for AdamW before this), or a value out of range (performer::ValidateOptimizerSettings).
absl::StatusOr<performer::OptimizerSettings> OptimizerSettingsFromProto(
    const v1::Optimizer& optimizer, absl::string_view field = "spec.optimizer");

// The same without any check: unset fields at their defaults (an unset kind is AdamW). For the
// memory accounting of a spec that was validated where it came in.
performer::OptimizerSettings OptimizerSettingsOf(const v1::Optimizer& optimizer);

// OptimizerSettingsFromProto's status alone.
absl::Status ValidateOptimizer(const v1::Optimizer& optimizer, absl::string_view field = "spec.optimizer");

// NONE and UNSPECIFIED are exact; FLOAT16, BFLOAT16 and INT8 their lossy encodings.
performer::TensorEncoding TensorEncodingFromProto(v1::Compression compression);

}  // namespace slimfit::wire

#endif  // SLIMFIT_WIRE_ENGINE_SETTINGS_H_
