#include "performer/trainer.h"

#include <torch/optim.h>

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "performer/adamw_step.h"
#include "performer/file_backed_tensors.h"
#include "performer/model_checkpoint.h"
#include "performer/performer_model.h"
#include "performer/safetensors.h"
#include "performer/tensor_norms.h"

namespace slimfit::performer {
namespace {

// The key of a parameter's entry in the optimizer's state map: its TensorImpl's address, as text in
// LibTorch 1.x and as the pointer itself in 2.x (the key type is read off the map).
using OptimizerStateKey =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state().begin()->first)>;

template <typename Key>
Key StateKeyOf(const void* impl) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // what LibTorch 1.x writes: c10::guts::to_string of the pointer
    text << impl;
    return text.str();
  } else {
    return const_cast<void*>(impl);
  }
}

OptimizerStateKey StateKey(const at::Tensor& parameter) {
  return StateKeyOf<OptimizerStateKey>(parameter.unsafeGetTensorImpl());
}

// The optimizer state's file; file-backed moments leave the resident set as each is written.
absl::Status WriteOptimizerState(const std::string& path, const performer::TensorFile& state) {
  SafetensorsWriteOptions options;
  options.after_each_tensor = [](const at::Tensor& tensor) { ReleaseResidentPages(tensor); };
  return performer::WriteSafetensors(path, state, options);
}

}  // namespace

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const performer::ModelConfig& config,
                                                         performer::DType dtype,
                                                         std::vector<at::Tensor> parameters,
                                                         const OptimizerSettings& optimizer,
                                                         const std::vector<int>& trainable) {
  if (absl::Status valid = ValidateOptimizerSettings(optimizer); !valid.ok()) return valid;
  std::unique_ptr<Trainer> trainer(new Trainer());
  trainer->config_ = config;
  trainer->dtype_ = dtype;
  trainer->names_ = performer::ParameterNames(config);
  trainer->spec_ = optimizer;
  if (parameters.size() != trainer->names_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer: ", parameters.size(), " parameters for a model of ", trainer->names_.size()));
  }
  try {
    for (at::Tensor& p : parameters) {
      p = p.detach().to(at::kCPU, performer::ToScalarType(dtype)).contiguous().clone();
      p.set_requires_grad(true);
    }
    trainer->parameters_ = std::move(parameters);
    trainer->trainable_.assign(trainer->parameters_.size(), trainable.empty());
    for (const int index : trainable) {
      if (index < 0 || static_cast<size_t>(index) >= trainer->parameters_.size()) {
        return absl::InvalidArgumentError(absl::StrCat("trainer: trainable parameter index ", index,
                                                       " of a model of ", trainer->parameters_.size()));
      }
      trainer->trainable_[static_cast<size_t>(index)] = true;
    }
    std::vector<at::Tensor> stepped;
    for (size_t i = 0; i < trainer->parameters_.size(); ++i) {
      if (trainer->trainable_[i]) {
        stepped.push_back(trainer->parameters_[i]);
      } else {
        trainer->parameters_[i].set_requires_grad(false);
      }
    }
    const double lr = optimizer.learning_rate;
    if (optimizer.is_adamw()) {
      torch::optim::AdamWOptions options(lr);
      options.betas(std::make_tuple(optimizer.beta1, optimizer.beta2));
      options.eps(optimizer.epsilon);
      options.weight_decay(optimizer.weight_decay);
      trainer->optimizer_ = std::make_unique<torch::optim::AdamW>(stepped, options);
    } else {
      torch::optim::SGDOptions options(lr);
      options.momentum(optimizer.momentum);
      options.nesterov(optimizer.nesterov);
      options.weight_decay(optimizer.weight_decay);
      trainer->optimizer_ = std::make_unique<torch::optim::SGD>(stepped, options);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("creating the optimizer: ", e.what_without_backtrace()));
  }
  return trainer;
}

double Trainer::LearningRate(int64_t step) const {
  const double lr = spec_.learning_rate;
  const int64_t warmup = spec_.warmup_steps;
  if (warmup <= 0) return lr;
  return lr * std::min(1.0, static_cast<double>(step) / static_cast<double>(warmup));
}

absl::StatusOr<StepResult> Trainer::Step(std::vector<at::Tensor> gradient) {
  if (gradient.size() != parameters_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient has ", gradient.size(), " tensors; the model has ", parameters_.size()));
  }
  StepResult result;
  try {
    double squares = 0;
    for (size_t i = 0; i < gradient.size(); ++i) {
      if (!gradient[i].sizes().equals(parameters_[i].sizes())) {
        return absl::InvalidArgumentError(absl::StrCat("gradient of ", names_[i], " has shape ",
                                                       c10::str(gradient[i].sizes()), "; the parameter ",
                                                       c10::str(parameters_[i].sizes())));
      }
      if (trainable_[i]) squares += SquaredNorm(gradient[i]);
    }
    result.gradient_norm = std::sqrt(squares);
    if (!std::isfinite(result.gradient_norm)) {
      return absl::InvalidArgumentError("the aggregated gradient is not finite");
    }
    double scale = 1.0;
    if (spec_.gradient_clip_norm.has_value()) {
      const double coefficient = *spec_.gradient_clip_norm / (result.gradient_norm + 1e-6);
      if (coefficient < 1.0) scale = coefficient;
    }
    std::vector<at::Tensor> grads(gradient.size());
    for (size_t i = 0; i < gradient.size(); ++i) {
      if (!trainable_[i]) {
        gradient[i] = at::Tensor();
        continue;
      }
      // A contiguous tensor of the parameter's dtype and device is the gradient as it is; anything
      // else is converted once and released as it is.
      at::Tensor g = gradient[i].detach();
      gradient[i] = at::Tensor();
      if (g.scalar_type() != parameters_[i].scalar_type() || g.device() != parameters_[i].device() ||
          !g.is_contiguous()) {
        g = g.to(parameters_[i].options().requires_grad(false), /*non_blocking=*/false, /*copy=*/true);
      }
      grads[i] = std::move(g);
    }
    result.learning_rate = LearningRate(steps_ + 1);
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(result.learning_rate);
    if (!StepAdamWFused(grads, scale)) {
      for (size_t i = 0; i < grads.size(); ++i) {
        if (!grads[i].defined()) continue;
        if (scale != 1.0) grads[i].mul_(scale);
        parameters_[i].mutable_grad() = std::move(grads[i]);
      }
      optimizer_->step();
      if (!state_directory_.empty()) {
        for (const auto& [key, state] : optimizer_->state()) {
          const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
          ReleaseResidentPages(s.exp_avg());
          ReleaseResidentPages(s.exp_avg_sq());
        }
      }
    }
    for (at::Tensor& p : parameters_) p.mutable_grad() = at::Tensor();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("optimizer step ", steps_ + 1, ": ", e.what_without_backtrace()));
  }
  ++steps_;
  return result;
}

bool Trainer::StepAdamWFused(std::vector<at::Tensor>& grads, double scale) {
  if (!fused_steps_ || !spec_.is_adamw()) return false;
  auto& states = optimizer_->state();
  std::vector<torch::optim::AdamWParamState*> stepped(grads.size(), nullptr);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    at::Tensor& p = parameters_[i];
    auto it = states.find(StateKey(p));
    if (it == states.end()) {  // the state LibTorch's first step creates
      auto state = std::make_unique<torch::optim::AdamWParamState>();
      state->step(0);
      state->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve).detach());
      state->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve).detach());
      it = states.emplace(StateKey(p), std::move(state)).first;
    }
    auto* state = static_cast<torch::optim::AdamWParamState*>(it->second.get());
    if (!AdamWStepApplies(p, grads[i], state->exp_avg(), state->exp_avg_sq())) return false;
    stepped[i] = state;
  }
  // The optimizer's own options (Create's defaults, this step's learning rate): one source for both
  // paths.
  const auto& options =
      static_cast<const torch::optim::AdamWOptions&>(optimizer_->param_groups().front().options());
  AdamWHyperparameters hyper;
  hyper.learning_rate = options.lr();
  hyper.beta1 = std::get<0>(options.betas());
  hyper.beta2 = std::get<1>(options.betas());
  hyper.epsilon = options.eps();
  hyper.weight_decay = options.weight_decay();
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (stepped[i] == nullptr) continue;
    torch::optim::AdamWParamState& state = *stepped[i];
    state.step(state.step() + 1);
    at::Tensor p = parameters_[i].detach();
    PrepareForWriting(state.exp_avg());  // file-backed moments: mapped in one call each
    PrepareForWriting(state.exp_avg_sq());
    AdamWStep(p, grads[i], state.exp_avg(), state.exp_avg_sq(), state.step(), hyper, scale);
    grads[i] = at::Tensor();                // released as soon as it is used
    ReleaseResidentPages(state.exp_avg());  // file-backed moments leave the resident set
    ReleaseResidentPages(state.exp_avg_sq());
  }
  return true;
}

absl::Status Trainer::Save(const std::string& model_path, const std::string& optimizer_path,
                           const std::map<std::string, std::string>& metadata) const {
  return WriteCheckpoint(TakeCheckpoint(metadata), model_path, optimizer_path);
}

Trainer::Checkpoint Trainer::TakeCheckpoint(const std::map<std::string, std::string>& metadata) const {
  Checkpoint checkpoint;
  checkpoint.names = names_;
  for (const at::Tensor& p : parameters_) checkpoint.parameters.push_back(p.detach());
  checkpoint.model_metadata = performer::ConfigToMetadata(config_);
  for (const auto& [key, value] : metadata) checkpoint.model_metadata.emplace(key, value);
  checkpoint.optimizer_state = OptimizerState();
  return checkpoint;
}

absl::Status Trainer::WriteCheckpoint(const Checkpoint& checkpoint, const std::string& model_path,
                                      const std::string& optimizer_path) {
  if (absl::Status saved = performer::SaveNamedTensors(model_path, checkpoint.names, checkpoint.parameters,
                                                       checkpoint.model_metadata);
      !saved.ok()) {
    return saved;
  }
  return WriteOptimizerState(optimizer_path, checkpoint.optimizer_state);
}

absl::Status Trainer::SetParameters(const std::vector<at::Tensor>& values) {
  if (values.size() != parameters_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("setting parameters: ", values.size(), " tensors for a model of ", parameters_.size()));
  }
  try {
    for (size_t i = 0; i < values.size(); ++i) {
      if (!values[i].sizes().equals(parameters_[i].sizes())) {
        return absl::InvalidArgumentError(absl::StrCat("setting parameters: ", names_[i], " has shape ",
                                                       c10::str(values[i].sizes()), "; the model's is ",
                                                       c10::str(parameters_[i].sizes())));
      }
    }
    for (size_t i = 0; i < values.size(); ++i) parameters_[i].detach().copy_(values[i].detach());
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("setting parameters: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::SeparateParameters() {
  try {
    // set_data keeps each parameter's TensorImpl, which the optimizer's state is keyed on.
    // Frozen parameters are never written: they keep their memory.
    for (size_t i = 0; i < parameters_.size(); ++i) {
      if (trainable_[i]) parameters_[i].set_data(parameters_[i].detach().clone());
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("copying the parameters: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::SaveOptimizerState(const std::string& optimizer_path) const {
  return WriteOptimizerState(optimizer_path, OptimizerState());
}

performer::TensorFile Trainer::OptimizerState() const {
  performer::TensorFile state;
  state.metadata["steps"] = absl::StrCat(steps_);
  state.metadata["optimizer"] = spec_.is_adamw() ? "adamw" : "sgd";
  const auto& states = optimizer_->state();
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto it = states.find(StateKey(parameters_[i]));
    if (it == states.end()) continue;
    if (spec_.is_adamw()) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      if (s.step() == 0) continue;  // made ahead of its first step (KeepOptimizerStateIn)
      state.tensors["exp_avg." + names_[i]] = s.exp_avg();
      state.tensors["exp_avg_sq." + names_[i]] = s.exp_avg_sq();
      state.tensors["step." + names_[i]] = torch::tensor({s.step()}, torch::kLong);
    } else {
      const auto& s = static_cast<const torch::optim::SGDParamState&>(*it->second);
      if (s.momentum_buffer().defined()) state.tensors["momentum_buffer." + names_[i]] = s.momentum_buffer();
    }
  }
  return state;
}

absl::Status Trainer::LoadOptimizerState(const std::string& optimizer_path) {
  absl::StatusOr<performer::TensorFile> file = performer::ReadSafetensors(optimizer_path);
  if (!file.ok()) return file.status();
  const std::string kind = spec_.is_adamw() ? "adamw" : "sgd";
  auto kind_it = file->metadata.find("optimizer");
  if (kind_it == file->metadata.end() || kind_it->second != kind) {
    return absl::InvalidArgumentError(absl::StrCat(optimizer_path, ": optimizer state is not ", kind));
  }
  int64_t steps = 0;
  auto steps_it = file->metadata.find("steps");
  if (steps_it == file->metadata.end() || !absl::SimpleAtoi(steps_it->second, &steps) || steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(optimizer_path, ": missing or bad \"steps\""));
  }
  auto& states = optimizer_->state();
  states.clear();
  try {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      const at::Tensor& p = parameters_[i];
      auto get = [&](const std::string& prefix) -> at::Tensor {
        auto it = file->tensors.find(prefix + names_[i]);
        if (it == file->tensors.end()) return at::Tensor();
        // The file's tensor is owned (safetensors.h): used as it is when it has the right type.
        at::Tensor t = it->second.to(p.options().requires_grad(false));
        file->tensors.erase(it);
        return t;
      };
      if (spec_.is_adamw()) {
        at::Tensor exp_avg = get("exp_avg."), exp_avg_sq = get("exp_avg_sq.");
        auto step_it = file->tensors.find("step." + names_[i]);
        if (!exp_avg.defined() || !exp_avg_sq.defined() || step_it == file->tensors.end()) continue;
        if (!exp_avg.sizes().equals(p.sizes()) || !exp_avg_sq.sizes().equals(p.sizes())) {
          return absl::InvalidArgumentError(
              absl::StrCat(optimizer_path, ": state of ", names_[i], " has the wrong shape"));
        }
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(step_it->second.item<int64_t>());
        s->exp_avg(exp_avg);
        s->exp_avg_sq(exp_avg_sq);
        states[StateKey(p)] = std::move(s);
      } else {
        at::Tensor buffer = get("momentum_buffer.");
        if (!buffer.defined()) continue;
        if (!buffer.sizes().equals(p.sizes())) {
          return absl::InvalidArgumentError(
              absl::StrCat(optimizer_path, ": state of ", names_[i], " has the wrong shape"));
        }
        auto s = std::make_unique<torch::optim::SGDParamState>();
        s->momentum_buffer(buffer);
        states[StateKey(p)] = std::move(s);
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(optimizer_path, ": restoring optimizer state: ", e.what_without_backtrace()));
  }
  steps_ = steps;
  file->tensors.clear();
  if (!state_directory_.empty()) return MoveAdamWStateToFiles(state_directory_);
  return absl::OkStatus();
}

absl::Status Trainer::KeepOptimizerStateIn(const std::string& directory) {
  if (!spec_.is_adamw()) {
    return absl::FailedPreconditionError(
        "optimizer state on disk: only AdamW's moments can be kept in files");
  }
  if (directory.empty()) return absl::InvalidArgumentError("optimizer state on disk: no directory given");
  if (absl::Status moved = MoveAdamWStateToFiles(directory); !moved.ok()) return moved;
  state_directory_ = directory;
  return absl::OkStatus();
}

absl::Status Trainer::MoveAdamWStateToFiles(const std::string& directory) {
  auto& states = optimizer_->state();
  // Every file first: a failure leaves the state as it was.
  std::vector<std::pair<size_t, std::unique_ptr<torch::optim::AdamWParamState>>> moved;
  try {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      if (!trainable_[i]) continue;
      const at::Tensor& p = parameters_[i];
      auto it = states.find(StateKey(p));
      const auto* old =
          it == states.end() ? nullptr : static_cast<const torch::optim::AdamWParamState*>(it->second.get());
      if (old != nullptr && IsFileBacked(old->exp_avg()) && IsFileBacked(old->exp_avg_sq())) continue;
      auto state = std::make_unique<torch::optim::AdamWParamState>();
      state->step(old != nullptr ? old->step() : 0);
      for (const bool second : {false, true}) {
        absl::StatusOr<at::Tensor> moment = FileBackedZerosLike(directory, p);
        if (!moment.ok()) {
          return absl::Status(moment.status().code(), absl::StrCat("optimizer state of ", names_[i], ": ",
                                                                   moment.status().message()));
        }
        if (old != nullptr) moment->copy_(second ? old->exp_avg_sq() : old->exp_avg());
        ReleaseResidentPages(*moment);
        if (second) {
          state->exp_avg_sq(*moment);
        } else {
          state->exp_avg(*moment);
        }
      }
      moved.emplace_back(i, std::move(state));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("moving the optimizer state to ", directory, ": ", e.what_without_backtrace()));
  }
  for (auto& [i, state] : moved) states[StateKey(parameters_[i])] = std::move(state);
  return absl::OkStatus();
}

}  // namespace slimfit::performer
