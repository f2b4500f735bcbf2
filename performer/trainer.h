// A model's parameters and an optimizer over them: the coordinator's step of a synchronous round
// (the aggregated gradient of the round's mean loss), its outer step of a local-steps round (the
// averaged pseudo-gradient), and a worker's inner steps of a local-steps round. Takes a gradient,
// clips it to a global L2 norm, sets the learning rate of the warm-up schedule and steps AdamW (in
// one pass per tensor, adamw_step.h, its state kept as torch::optim::AdamW's) or
// torch::optim::SGD. Saves and restores parameters and optimizer state as safetensors files
// (written atomically), so a job resumes after a restart exactly where its checkpoint left it.
//
// The optimizer's settings, learning-rate schedule and clipping: performer/optimizer_settings.h.
//
// Thread safety: not thread-safe; one job runner owns a Trainer.
#ifndef SLIMFIT_PERFORMER_TRAINER_H_
#define SLIMFIT_PERFORMER_TRAINER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "performer/model_config.h"
#include "performer/optimizer_settings.h"
#include "performer/plan.h"
#include "performer/safetensors.h"

namespace torch::optim {
class Optimizer;  // <torch/optim.h>: included by trainer.cc only (it is heavy to compile)
}  // namespace torch::optim

namespace slimfit::performer {

struct StepResult {
  double gradient_norm = 0;  // global L2 norm before clipping
  double learning_rate = 0;  // used by this step
};

class Trainer {
 public:
  // Takes ownership of `parameters` (checkpoint layout, in performer::ParameterNames(config)
  // order, CPU). `trainable`: indices (increasing) of the parameters the optimizer steps, the others
  // frozen (no update, no weight decay, no state); empty: all. INVALID_ARGUMENT when
  // ValidateOptimizerSettings(optimizer) fails.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const performer::ModelConfig& config,
                                                         performer::DType dtype,
                                                         std::vector<at::Tensor> parameters,
                                                         const OptimizerSettings& optimizer,
                                                         const std::vector<int>& trainable = {});

  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step with `gradient` (same names/shapes/order as the parameters; frozen
  // parameters' entries are ignored, and the norm and clipping cover the trainable ones).
  // INVALID_ARGUMENT for a shape mismatch or a non-finite gradient (nothing is changed then).
  // A contiguous tensor of the parameter's dtype and device (the coordinator's sum) is used as it
  // is, without a copy; when clipping, it may be scaled in place (SGD, or AdamW with
  // set_fused_steps(false)): the caller's values may change. A tensor of another floating dtype
  // or layout is converted once and released as it is (pass it by std::move to let its memory go
  // during the step).
  absl::StatusOr<StepResult> Step(std::vector<at::Tensor> gradient);

  // Gives every trainable parameter memory of its own (a copy), leaving the memory it had to whoever still
  // holds views of it (the coordinator's published version, while a worker still fetches it), so
  // that the next Step does not write under them. The optimizer's state is kept.
  absl::Status SeparateParameters();

  // Overwrites the parameters' values in place with `values` (same names/shapes/order), keeping
  // the optimizer's state and step count: a worker starting a round's local steps from the new
  // global parameters. INVALID_ARGUMENT for a shape mismatch (nothing is changed then).
  absl::Status SetParameters(const std::vector<at::Tensor>& values);

  // Keeps AdamW's moments in unnamed files in `directory` (file_backed_tensors.h) from now on,
  // moving any the trainer has there: they are resident only while a step or a checkpoint passes
  // over them, one tensor at a time, so the trainer's resident memory is its parameters and the
  // gradient it is given (the coordinator's sum) instead of twice that. The files' blocks are
  // allocated here, 2× the trainable parameters' bytes; the steps and checkpoints are bit for bit
  // those of moments in memory. SGD's momentum stays in memory (FAILED_PRECONDITION for SGD).
  // Errors of FileBackedZerosLike (NOT_FOUND for a missing directory, RESOURCE_EXHAUSTED for a
  // full disk), naming the directory; the state is unchanged then. (With set_fused_steps(false)
  // LibTorch's step passes over every tensor before the pages are dropped: the moments are all
  // resident during that step. A resume passes them through memory once: LoadOptimizerState reads
  // the file whole.)
  absl::Status KeepOptimizerStateIn(const std::string& directory);
  // The directory of KeepOptimizerStateIn; empty: the moments are in memory.
  const std::string& optimizer_state_directory() const { return state_directory_; }

  // AdamW steps run as one pass per tensor (adamw_step.h; the default) or through
  // torch::optim::AdamW (false; for tests and benchmarks that compare the two). The state and the
  // checkpoints are the same either way.
  void set_fused_steps(bool fused) { fused_steps_ = fused; }

  int64_t steps() const { return steps_; }
  const performer::ModelConfig& config() const { return config_; }
  performer::DType dtype() const { return dtype_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<at::Tensor>& parameters() const { return parameters_; }

  // Writes the parameters (a self-describing model checkpoint with `metadata`) to `model_path`
  // and the optimizer state (moments, step counts) to `optimizer_path`, each atomically.
  absl::Status Save(const std::string& model_path, const std::string& optimizer_path,
                    const std::map<std::string, std::string>& metadata) const;
  // What Save writes, as handles to the trainer's tensors (nothing copied): written by
  // WriteCheckpoint on any thread, without the trainer — which may even be gone by then. The
  // values are the trainer's until its next Step, SeparateParameters or LoadOptimizerState, none
  // of which may run while they are being written.
  struct Checkpoint {
    std::vector<std::string> names;
    std::vector<at::Tensor> parameters;
    std::map<std::string, std::string> model_metadata;  // the config and `metadata`
    performer::TensorFile optimizer_state;
  };
  Checkpoint TakeCheckpoint(const std::map<std::string, std::string>& metadata) const;
  static absl::Status WriteCheckpoint(const Checkpoint& checkpoint, const std::string& model_path,
                                      const std::string& optimizer_path);

  // Writes only the optimizer state (as Save does), atomically.
  absl::Status SaveOptimizerState(const std::string& optimizer_path) const;

  // Restores the optimizer state written by Save (the parameters come with Create).
  // INVALID_ARGUMENT when the file does not match this model or optimizer.
  absl::Status LoadOptimizerState(const std::string& optimizer_path);

 private:
  // The optimizer's state as Save writes it (handles, nothing copied).
  performer::TensorFile OptimizerState() const;
  Trainer() = default;
  double LearningRate(int64_t step) const;
  // The AdamW step as one pass per tensor when the trainer uses AdamW and every tensor is one
  // adamw_step.h takes (it always is for the trainer's CPU float32/float64 parameters): true when
  // it stepped (each used gradient released), false when the optimizer's own step must run.
  bool StepAdamWFused(std::vector<at::Tensor>& grads, double scale);
  // With state_directory_: every trainable parameter's AdamW state in files (fresh ones at step 0,
  // which OptimizerState leaves out, as if they did not exist yet).
  absl::Status MoveAdamWStateToFiles(const std::string& directory);

  performer::ModelConfig config_;
  performer::DType dtype_ = performer::DType::kFloat32;
  std::vector<std::string> names_;
  std::vector<at::Tensor> parameters_;
  std::vector<bool> trainable_;  // per parameter
  OptimizerSettings spec_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int64_t steps_ = 0;
  bool fused_steps_ = true;
  std::string state_directory_;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_TRAINER_H_
