#include "client/local_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "performer/cpu_runtime.h"
#include "performer/device.h"
#include "performer/model_checkpoint.h"
#include "performer/plan.h"
#include "planner/plan_proto.h"

namespace slimfit::client {

LocalModelFlags::LocalModelFlags(base::FlagSet& flags) : flags_(flags), shape_(flags, "feature_map") {
  threads_ = std::max(1u, std::thread::hardware_concurrency());
  flags.String("model", &path_,
               "the model: FILE.safetensors (as `slimfit export` writes), or a torch.save state_dict with "
               "the reference implementation's names (then give its shape flags)",
               base::FlagSet::kRequired);
  flags.String("dtype", &dtype_, "float32 or float64");
  flags.String("device", &device_, "cpu or cuda:N");
  flags.Int("threads", &threads_, "CPU compute threads (default: the cores available)",
            base::FlagSet::kOptionalNoDefault);
  flags.Int("feature_seed", &feature_seed_,
            "favor+ models: the seed of their random features (default: the checkpoint's feature_seed, "
            "which training writes; else 0)",
            base::FlagSet::kOptionalNoDefault);
}

absl::StatusOr<LocalModel> LocalModelFlags::Load() const {
  absl::StatusOr<performer::DType> dtype = performer::ParseDType(dtype_);
  if (!dtype.ok())
    return absl::InvalidArgumentError(absl::StrCat("--dtype=", dtype_, ": ", dtype.status().message()));
  absl::StatusOr<c10::Device> device = performer::ParseDevice(device_);
  if (!device.ok()) return device.status();
  if (threads_ < 1 || threads_ > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", threads_, ": expected 1 to 4096"));
  }
  if (flags_.IsSet("feature_seed") && feature_seed_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--feature_seed=", feature_seed_, ": expected 0 or more"));
  }
  std::optional<performer::ModelConfig> expected;
  if (shape_.AnySet()) {
    v1::ModelConfig proto;
    if (absl::Status s = shape_.Apply(&proto); !s.ok()) return s;
    absl::StatusOr<performer::ModelConfig> config = planner::ModelConfigFromProto(proto, "the shape flags");
    if (!config.ok()) return config.status();
    expected = *config;
  }
  if (device->is_cpu()) {
    if (absl::Status s =
            performer::ConfigureCpuThreads(static_cast<int>(threads_), performer::ToScalarType(*dtype));
        !s.ok()) {
      return s;
    }
  }
  std::map<std::string, std::string> metadata;
  absl::StatusOr<performer::PerformerModel> model =
      performer::LoadModel(path_, *dtype, *device, expected, &metadata);
  if (!model.ok()) return model.status();
  uint64_t seed = static_cast<uint64_t>(feature_seed_);
  if (!flags_.IsSet("feature_seed")) {
    seed = 0;
    auto it = metadata.find(performer::kFeatureSeedKey);
    if (it != metadata.end() && !absl::SimpleAtoi(it->second, &seed)) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": metadata ", performer::kFeatureSeedKey,
                                                     " = \"", it->second,
                                                     "\" is not a seed; pass --feature_seed"));
    }
  }
  return LocalModel{*std::move(model), seed, path_};
}

}  // namespace slimfit::client
