// A model file on this machine, for the commands that run a model here (`slimfit generate`,
// `slimfit score`): the flags that say which file and how to run it, and the loading.
//
//   --model=FILE            .safetensors (its shape from its metadata) or a torch.save state_dict
//   shape flags             --d_model --layers --heads --d_ff --vocab --feature_map
//                           --feature_multiplier --ln: needed for a file that does not describe its
//                           model (the reference implementation's files, torch.save); must agree
//                           with a file that does
//   --feature_seed=N        favor+ features (default: the checkpoint's "feature_seed", else 0)
//   --dtype --device --threads
//
// Thread safety: like the base::FlagSet it registers on; must not outlive it.
#ifndef SLIMFIT_CLIENT_LOCAL_MODEL_H_
#define SLIMFIT_CLIENT_LOCAL_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "base/flags.h"
#include "client/model_flags.h"
#include "performer/performer_model.h"

namespace slimfit::client {

struct LocalModel {
  performer::PerformerModel model;
  uint64_t feature_seed = 0;
  std::string path;
};

class LocalModelFlags {
 public:
  explicit LocalModelFlags(base::FlagSet& flags);
  LocalModelFlags(const LocalModelFlags&) = delete;
  LocalModelFlags& operator=(const LocalModelFlags&) = delete;

  // After Parse: loads the model on the chosen device and gives the CPU its threads.
  // INVALID_ARGUMENT naming the flag for a bad --dtype, --device, --threads, --feature_seed or shape
  // flag, or a file whose metadata seed is malformed; LoadModel's errors (NOT_FOUND for a missing
  // file; INVALID_ARGUMENT naming the tensor, or saying to pass the shape).
  absl::StatusOr<LocalModel> Load() const;

 private:
  const base::FlagSet& flags_;
  ModelShapeFlags shape_;
  std::string path_;
  std::string dtype_ = "float32";
  std::string device_ = "cpu";
  int64_t threads_ = 0;
  int64_t feature_seed_ = 0;
};

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_LOCAL_MODEL_H_
