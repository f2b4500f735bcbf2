// Model checkpoints: a PerformerModel to and from files.
//
// The native format is safetensors with the model's shape in its metadata (keys vocab, d_model,
// layers, heads, d_ff, feature, feature_multiplier, layernorm — the same keys the test fixtures
// use), so a checkpoint is self-describing. A PyTorch state_dict saved with
// `torch.save(dict(model.state_dict()), path)` can be imported too; it carries no shape, so the
// caller supplies the config. Parameter names follow the reference implementation either way.
//
// Example:
//   absl::Status saved = SaveModel("/ckpt/model.safetensors", model);
//   absl::StatusOr<PerformerModel> loaded = LoadModel("/ckpt/model.safetensors", DType::kFloat32, at::kCPU);
//
// Thread safety: free functions; concurrent calls on different paths are safe.
#ifndef SLIMFIT_PERFORMER_MODEL_CHECKPOINT_H_
#define SLIMFIT_PERFORMER_MODEL_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "performer/model_config.h"
#include "performer/performer_model.h"
#include "performer/plan.h"

namespace slimfit::performer {

std::map<std::string, std::string> ConfigToMetadata(const ModelConfig& config);

// INVALID_ARGUMENT naming the key when a field is missing or malformed, or the config is invalid.
absl::StatusOr<ModelConfig> ConfigFromMetadata(const std::map<std::string, std::string>& metadata);

// Writes the parameters and the config atomically (WriteSafetensors). `extra_metadata` is merged
// in (e.g. job id, round); it may not override config keys.
absl::Status SaveModel(const std::string& path, const PerformerModel& model,
                       const std::map<std::string, std::string>& extra_metadata = {});

// Reads a model. A `.safetensors` file takes its config from its metadata; when `expected` is
// given as well, the two must agree. Any other file is read as a torch.save plain dict and needs
// `expected`. Tensors whose names start with "grad." or "fixture." or "favor." are ignored.
// When `metadata` is given it receives the safetensors file's metadata (nothing for a torch.save file).
// Errors: NOT_FOUND for a missing file; INVALID_ARGUMENT naming the tensor or key at fault.
absl::StatusOr<PerformerModel> LoadModel(const std::string& path, DType dtype, const at::Device& device,
                                         const std::optional<ModelConfig>& expected = std::nullopt,
                                         std::map<std::string, std::string>* metadata = nullptr);

// The metadata key under which training checkpoints record the FAVOR+ feature seed (the job's
// seed): a favor+ model must be run with the features it was trained with.
inline constexpr char kFeatureSeedKey[] = "feature_seed";

// Writes named tensors (e.g. a gradient in model.names() order) as safetensors.
absl::Status SaveNamedTensors(const std::string& path, const std::vector<std::string>& names,
                              const std::vector<at::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_MODEL_CHECKPOINT_H_
