#include "performer/model_checkpoint.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "performer/safetensors.h"
#include "performer/torch_state_dict.h"

namespace slimfit::performer {
namespace {

absl::StatusOr<int64_t> IntField(const std::map<std::string, std::string>& metadata, const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint metadata has no '", key, "'"));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint metadata '", key, "' is not an integer: '", it->second, "'"));
  }
  return value;
}

absl::Status SameShape(const ModelConfig& a, const ModelConfig& b) {
  if (a.DebugString() == b.DebugString()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("checkpoint holds a model with ", a.DebugString(), " but ",
                                                 b.DebugString(), " was requested"));
}

}  // namespace

std::map<std::string, std::string> ConfigToMetadata(const ModelConfig& config) {
  return {{"vocab", absl::StrCat(config.vocab)},
          {"d_model", absl::StrCat(config.d_model)},
          {"layers", absl::StrCat(config.layers)},
          {"heads", absl::StrCat(config.heads)},
          {"d_ff", absl::StrCat(config.d_ff)},
          {"feature", std::string(FeatureMapName(config.feature_map))},
          {"feature_multiplier", absl::StrCat(config.feature_multiplier)},
          {"layernorm", std::string(LayerNormPlacementName(config.layernorm))}};
}

absl::StatusOr<ModelConfig> ConfigFromMetadata(const std::map<std::string, std::string>& metadata) {
  ModelConfig config;
  for (auto [key, field] : {std::pair<const char*, int64_t*>{"vocab", &config.vocab},
                            {"d_model", &config.d_model},
                            {"layers", &config.layers},
                            {"heads", &config.heads},
                            {"d_ff", &config.d_ff}}) {
    absl::StatusOr<int64_t> value = IntField(metadata, key);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  if (metadata.count("feature_multiplier") > 0) {
    absl::StatusOr<int64_t> value = IntField(metadata, "feature_multiplier");
    if (!value.ok()) return value.status();
    config.feature_multiplier = *value;
  }
  auto feature = metadata.find("feature");
  if (feature == metadata.end()) return absl::InvalidArgumentError("checkpoint metadata has no 'feature'");
  absl::StatusOr<FeatureMap> map = ParseFeatureMap(feature->second);
  if (!map.ok()) return map.status();
  config.feature_map = *map;
  auto ln = metadata.find("layernorm");
  if (ln == metadata.end()) return absl::InvalidArgumentError("checkpoint metadata has no 'layernorm'");
  absl::StatusOr<LayerNormPlacement> placement = ParseLayerNormPlacement(ln->second);
  if (!placement.ok()) return placement.status();
  config.layernorm = *placement;
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  return config;
}

absl::Status SaveModel(const std::string& path, const PerformerModel& model,
                       const std::map<std::string, std::string>& extra_metadata) {
  TensorFile file;
  file.tensors = model.StateDict();
  file.metadata = ConfigToMetadata(model.config());
  for (const auto& [key, value] : extra_metadata) {
    if (file.metadata.count(key) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key '", key, "' is reserved for the model config"));
    }
    file.metadata.emplace(key, value);
  }
  return WriteSafetensors(path, file);
}

absl::StatusOr<PerformerModel> LoadModel(const std::string& path, DType dtype, const at::Device& device,
                                         const std::optional<ModelConfig>& expected,
                                         std::map<std::string, std::string>* metadata) {
  if (metadata != nullptr) metadata->clear();
  const std::vector<std::string> ignored = {"grad.", "fixture.", "favor."};
  if (absl::EndsWith(path, ".safetensors")) {
    absl::StatusOr<TensorFile> file = ReadSafetensors(path);
    if (!file.ok()) return file.status();
    ModelConfig config;
    absl::StatusOr<ModelConfig> stored = ConfigFromMetadata(file->metadata);
    if (stored.ok()) {
      if (expected.has_value()) {
        if (absl::Status s = SameShape(*stored, *expected); !s.ok()) return s;
      }
      config = *stored;
    } else if (expected.has_value()) {
      config = *expected;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(path, " does not describe its model (",
                                                     stored.status().message(),
                                                     "); pass the model's shape (--d_model, --layers, ...)"));
    }
    // The file's tensors (each read into memory of its own) become the model without a copy.
    absl::StatusOr<PerformerModel> model =
        PerformerModel::FromOwnedTensors(config, std::move(file->tensors), dtype, device, ignored);
    if (!model.ok())
      return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
    if (metadata != nullptr) *metadata = std::move(file->metadata);
    return model;
  }
  if (!expected.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     " is not a .safetensors file; a PyTorch state_dict carries no model shape, so pass the "
                     "model's shape (--d_model, --layers, ...)"));
  }
  absl::StatusOr<std::map<std::string, at::Tensor>> tensors = ReadTorchStateDict(path);
  if (!tensors.ok()) return tensors.status();
  absl::StatusOr<PerformerModel> model =
      PerformerModel::FromTensors(*expected, *tensors, dtype, device, ignored);
  if (!model.ok())
    return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
  return model;
}

absl::Status SaveNamedTensors(const std::string& path, const std::vector<std::string>& names,
                              const std::vector<at::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  if (names.size() != tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(names.size(), " names for ", tensors.size(), " tensors"));
  }
  TensorFile file;
  for (size_t i = 0; i < names.size(); ++i) file.tensors.emplace(names[i], tensors[i]);
  file.metadata = metadata;
  return WriteSafetensors(path, file);
}

}  // namespace slimfit::performer
