#include "performer/trainer.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "performer/performer_model.h"

namespace slimfit::performer {
namespace {

using ::testing::HasSubstr;

performer::ModelConfig Tiny() {
  performer::ModelConfig config;
  config.vocab = 16;
  config.d_model = 8;
  config.layers = 1;
  config.heads = 2;
  config.d_ff = 8;
  return config;
}

std::vector<at::Tensor> Parameters(uint64_t seed) {
  return performer::PerformerModel::Create(Tiny(), performer::DType::kFloat64, at::kCPU, seed)->parameters();
}

std::vector<at::Tensor> Gradient(const std::vector<at::Tensor>& like, double scale) {
  std::vector<at::Tensor> g;
  for (size_t i = 0; i < like.size(); ++i) g.push_back(at::full_like(like[i], scale * (1.0 + 0.1 * i)));
  return g;
}

TEST(TrainerTest, SgdStepIsParameterMinusLearningRateTimesGradient) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kSgd;
  spec.learning_rate = 0.5;
  std::vector<at::Tensor> before = Parameters(1);
  auto trainer = Trainer::Create(Tiny(), performer::DType::kFloat64, before, spec);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::vector<at::Tensor> g = Gradient(before, 0.2);
  absl::StatusOr<StepResult> step = (*trainer)->Step(g);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_DOUBLE_EQ(step->learning_rate, 0.5);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(at::allclose((*trainer)->parameters()[i], before[i] - 0.5 * g[i], 1e-12, 1e-12)) << i;
  }
}

TEST(TrainerTest, AdamWFirstStepMatchesTheFormula) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kAdamW;
  spec.learning_rate = 0.01;
  spec.weight_decay = 0.1;
  std::vector<at::Tensor> before = Parameters(2);
  auto trainer = Trainer::Create(Tiny(), performer::DType::kFloat64, before, spec);
  ASSERT_TRUE(trainer.ok());
  std::vector<at::Tensor> g = Gradient(before, 0.3);
  ASSERT_TRUE((*trainer)->Step(g).ok());
  // Step 1: m̂ = g, v̂ = g², update = g / (|g| + ε); decay p·(1 − lr·wd) first.
  for (size_t i = 0; i < before.size(); ++i) {
    at::Tensor want = before[i] * (1 - 0.01 * 0.1) - 0.01 * g[i] / (g[i].abs() + 1e-8);
    EXPECT_TRUE(at::allclose((*trainer)->parameters()[i], want, 1e-9, 1e-12)) << i;
  }
}

TEST(TrainerTest, FrozenParametersStayBitForBitAndTheNormCoversTheTrainableOnes) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kAdamW;
  spec.learning_rate = 0.01;
  spec.weight_decay = 0.1;  // would move a frozen parameter if the optimizer held it
  std::vector<at::Tensor> before = Parameters(3);
  ASSERT_GE(before.size(), 3u);
  const std::vector<int> trainable = {1, static_cast<int>(before.size()) - 1};
  auto trainer = Trainer::Create(Tiny(), performer::DType::kFloat64, before, spec, trainable);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::vector<at::Tensor> g = Gradient(before, 0.3);
  absl::StatusOr<StepResult> step = (*trainer)->Step(g);
  ASSERT_TRUE(step.ok()) << step.status();
  double squares = 0;
  for (int i : trainable) squares += g[static_cast<size_t>(i)].pow(2).sum().item<double>();
  EXPECT_NEAR(step->gradient_norm, std::sqrt(squares), 1e-9);
  for (size_t i = 0; i < before.size(); ++i) {
    const bool trained = i == 1 || i == before.size() - 1;
    if (trained) {
      at::Tensor want = before[i] * (1 - 0.01 * 0.1) - 0.01 * g[i] / (g[i].abs() + 1e-8);
      EXPECT_TRUE(at::allclose((*trainer)->parameters()[i], want, 1e-9, 1e-12)) << i;
    } else {
      EXPECT_TRUE(at::equal((*trainer)->parameters()[i], before[i])) << i;
    }
  }
  // The optimizer state holds the trainable parameters only, and resumes them.
  const std::string path = testing_util::TempPath("frozen.optimizer.safetensors");
  ASSERT_TRUE((*trainer)->SaveOptimizerState(path).ok());
  auto resumed =
      Trainer::Create(Tiny(), performer::DType::kFloat64, (*trainer)->parameters(), spec, trainable);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->LoadOptimizerState(path).ok());
  EXPECT_FALSE(Trainer::Create(Tiny(), performer::DType::kFloat64, before, spec, {99}).ok());
}

TEST(TrainerTest, WarmupAndClipping) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kSgd;
  spec.learning_rate = 1.0;
  spec.warmup_steps = 4;
  spec.gradient_clip_norm = 1.0;
  std::vector<at::Tensor> before = Parameters(3);
  auto trainer = Trainer::Create(Tiny(), performer::DType::kFloat64, before, spec);
  std::vector<at::Tensor> g = Gradient(before, 10.0);
  auto norm_of = [](const std::vector<at::Tensor>& tensors) {
    double squares = 0;
    for (const at::Tensor& t : tensors) squares += t.pow(2).sum().item<double>();
    return std::sqrt(squares);
  };
  const double norm = norm_of(g);
  absl::StatusOr<StepResult> step = (*trainer)->Step(g);
  ASSERT_TRUE(step.ok());
  EXPECT_DOUBLE_EQ(step->learning_rate, 0.25);
  EXPECT_NEAR(step->gradient_norm, norm, 1e-9);
  // A gradient of the parameters' dtype was used as it is: clipped in place (the contract).
  EXPECT_NEAR(norm_of(g), 1.0, 1e-6);
  // The update has norm lr · 1 (clipped).
  double moved = 0;
  for (size_t i = 0; i < before.size(); ++i)
    moved += ((*trainer)->parameters()[i] - before[i]).pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(moved), 0.25, 1e-6);
  for (int s = 2; s <= 5; ++s) step = (*trainer)->Step(Gradient(before, 0.01));
  EXPECT_DOUBLE_EQ(step->learning_rate, 1.0);
}

TEST(TrainerTest, SavedOptimizerStateResumesExactly) {
  for (bool adamw : {true, false}) {
    OptimizerSettings spec;
    if (adamw)
      spec.kind = OptimizerSettings::Kind::kAdamW;
    else {
      spec.kind = OptimizerSettings::Kind::kSgd;
      spec.momentum = 0.9;
    }
    spec.learning_rate = 0.01;
    std::vector<at::Tensor> start = Parameters(4);
    auto straight = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
    auto first = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
    for (int s = 1; s <= 3; ++s) {
      ASSERT_TRUE((*straight)->Step(Gradient(start, 0.1 * s)).ok());
      if (s <= 2) {
        ASSERT_TRUE((*first)->Step(Gradient(start, 0.1 * s)).ok());
      }
    }
    const std::string model = testing_util::TempPath("model.safetensors");
    const std::string optimizer = testing_util::TempPath("optimizer.safetensors");
    ASSERT_TRUE((*first)->Save(model, optimizer, {{"round", "2"}}).ok());
    auto resumed = Trainer::Create(Tiny(), performer::DType::kFloat64, (*first)->parameters(), spec);
    ASSERT_TRUE((*resumed)->LoadOptimizerState(optimizer).ok());
    EXPECT_EQ((*resumed)->steps(), 2);
    ASSERT_TRUE((*resumed)->Step(Gradient(start, 0.3)).ok());
    for (size_t i = 0; i < start.size(); ++i) {
      // Equal up to the last bit or two: vectorised kernels may round differently on other buffers.
      EXPECT_TRUE(at::allclose((*resumed)->parameters()[i], (*straight)->parameters()[i], 1e-12, 1e-15))
          << adamw << " " << i << " "
          << ((*resumed)->parameters()[i] - (*straight)->parameters()[i]).abs().max().item<double>();
    }
    // The wrong optimizer kind is refused.
    OptimizerSettings other = spec;
    if (adamw)
      other.kind = OptimizerSettings::Kind::kSgd;
    else
      other.kind = OptimizerSettings::Kind::kAdamW;
    auto mismatched = Trainer::Create(Tiny(), performer::DType::kFloat64, start, other);
    EXPECT_THAT((*mismatched)->LoadOptimizerState(optimizer).message(), HasSubstr("optimizer state is not"));
  }
}

// The AdamW step in one pass (the default) against torch::optim::AdamW's (set_fused_steps(false)):
// float32, warm-up, clipping, weight decay and a frozen parameter, step by step; and the state one
// path saves resumes on the other (the checkpoints are the same).
TEST(TrainerTest, FusedAdamWStepsEqualLibTorchsAndShareTheirCheckpoints) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kAdamW;
  spec.beta2 = 0.99;
  spec.learning_rate = 0.01;
  spec.weight_decay = 0.1;
  spec.warmup_steps = 2;
  spec.gradient_clip_norm = 0.5;
  const std::vector<at::Tensor> start =
      performer::PerformerModel::Create(Tiny(), performer::DType::kFloat32, at::kCPU, 6)->parameters();
  auto fused = Trainer::Create(Tiny(), performer::DType::kFloat32, start, spec, {0, 2, 3});
  auto unfused = Trainer::Create(Tiny(), performer::DType::kFloat32, start, spec, {0, 2, 3});
  ASSERT_TRUE(fused.ok() && unfused.ok());
  (*unfused)->set_fused_steps(false);
  auto expect_near = [&](const Trainer& a, const Trainer& b, const std::string& where) {
    for (size_t i = 0; i < start.size(); ++i) {
      EXPECT_TRUE(at::allclose(a.parameters()[i], b.parameters()[i], 1e-5, 1e-7))
          << where << ", tensor " << i;
    }
  };
  for (int s = 1; s <= 3; ++s) {
    at::manual_seed(s);
    std::vector<at::Tensor> g;
    for (const at::Tensor& p : start)
      g.push_back(at::randn_like(p) * (s == 2 ? 0.01 : 3.0));  // clipped at 1, 3
    std::vector<at::Tensor> copy;
    for (const at::Tensor& t : g) copy.push_back(t.clone());
    absl::StatusOr<StepResult> a = (*fused)->Step(g);
    absl::StatusOr<StepResult> b = (*unfused)->Step(copy);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_DOUBLE_EQ(a->gradient_norm, b->gradient_norm);
    EXPECT_DOUBLE_EQ(a->learning_rate, b->learning_rate);
    expect_near(**fused, **unfused, absl::StrCat("step ", s));
  }
  EXPECT_TRUE(at::equal((*fused)->parameters()[1], start[1]));  // frozen
  EXPECT_FALSE(at::equal((*fused)->parameters()[0], start[0]));
  // Each path's saved state resumes on the other.
  for (const bool saved_fused : {true, false}) {
    Trainer& saver = saved_fused ? **fused : **unfused;
    const std::string optimizer = testing_util::TempPath(saved_fused ? "fused-optimizer.safetensors"
                                                                     : "libtorch-optimizer.safetensors");
    ASSERT_TRUE(saver.SaveOptimizerState(optimizer).ok());
    auto resumed = Trainer::Create(Tiny(), performer::DType::kFloat32, saver.parameters(), spec, {0, 2, 3});
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    ASSERT_TRUE((*resumed)->LoadOptimizerState(optimizer).ok());
    (*resumed)->set_fused_steps(!saved_fused);
    std::vector<at::Tensor> g;
    for (const at::Tensor& p : start) g.push_back(at::full_like(p, 0.02));
    std::vector<at::Tensor> copy;
    for (const at::Tensor& t : g) copy.push_back(t.clone());
    ASSERT_TRUE((*resumed)->Step(g).ok());
    ASSERT_TRUE(saver.Step(copy).ok());
    expect_near(**resumed, saver,
                saved_fused ? "one-pass state resumed on LibTorch's step"
                            : "LibTorch's state resumed on the one-pass step");
  }
}

TEST(TrainerTest, NonFiniteGradientChangesNothing) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kSgd;
  spec.learning_rate = 0.1;
  std::vector<at::Tensor> start = Parameters(5);
  auto trainer = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
  std::vector<at::Tensor> g = Gradient(start, 1.0);
  g[0][0] = std::nan("");
  EXPECT_EQ((*trainer)->Step(g).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*trainer)->steps(), 0);
  EXPECT_TRUE(at::equal((*trainer)->parameters()[1], start[1]));
}

TEST(TrainerTest, SetParametersKeepsTheMomentum) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kSgd;
  spec.momentum = 0.9;
  spec.learning_rate = 0.5;
  std::vector<at::Tensor> start = Parameters(6);
  auto trainer = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::vector<at::Tensor> g1 = Gradient(start, 0.2);
  ASSERT_TRUE((*trainer)->Step(g1).ok());

  // The next round's parameters: another model's values.
  std::vector<at::Tensor> next = Parameters(7);
  std::vector<at::Tensor> next_copy;
  for (const at::Tensor& t : next) next_copy.push_back(t.clone());
  ASSERT_TRUE((*trainer)->SetParameters(next).ok());
  EXPECT_EQ((*trainer)->steps(), 1);
  for (size_t i = 0; i < next.size(); ++i) EXPECT_TRUE(at::equal((*trainer)->parameters()[i], next[i])) << i;

  // Step 2 from the new values with the momentum buffer of step 1: b = 0.9·g1 + g2, p = next − lr·b.
  std::vector<at::Tensor> g2 = Gradient(start, -0.3);
  absl::StatusOr<StepResult> step = (*trainer)->Step(g2);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ((*trainer)->steps(), 2);
  for (size_t i = 0; i < next.size(); ++i) {
    at::Tensor want = next_copy[i] - 0.5 * (0.9 * g1[i] + g2[i]);
    EXPECT_TRUE(at::allclose((*trainer)->parameters()[i], want, 1e-12, 1e-14)) << i;
    // The trainer copied the values: the caller's tensors did not move with the step.
    EXPECT_TRUE(at::equal(next[i], next_copy[i])) << i;
  }
}

// What the coordinator relies on to publish the trainer's own memory: a view taken before
// SeparateParameters keeps its values through the next steps, while the steps go on exactly as
// without the separation (AdamW's moments are kept).
TEST(TrainerTest, SeparatedParametersLeaveEarlierViewsUntouchedAndStepAsBefore) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kAdamW;
  spec.learning_rate = 0.1;
  std::vector<at::Tensor> start = Parameters(8);
  auto separated = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
  auto straight = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
  ASSERT_TRUE(separated.ok() && straight.ok());
  for (auto* trainer : {&*separated, &*straight}) ASSERT_TRUE((*trainer)->Step(Gradient(start, 0.2)).ok());

  std::vector<at::Tensor> views, values;
  for (const at::Tensor& p : (*separated)->parameters()) {
    views.push_back(p.detach());  // what a published version holds
    values.push_back(p.detach().clone());
  }
  ASSERT_TRUE((*separated)->SeparateParameters().ok());
  for (auto* trainer : {&*separated, &*straight}) ASSERT_TRUE((*trainer)->Step(Gradient(start, -0.3)).ok());
  for (size_t i = 0; i < views.size(); ++i) {
    EXPECT_TRUE(at::equal(views[i], values[i])) << i;  // the view kept the version it had
    EXPECT_FALSE(at::equal((*separated)->parameters()[i], values[i])) << i;  // the trainer moved on
    EXPECT_TRUE(at::equal((*separated)->parameters()[i], (*straight)->parameters()[i])) << i;
  }
  // Without a separation the view follows the step: the memory is shared.
  const at::Tensor shared = (*straight)->parameters()[0].detach();
  const at::Tensor before = shared.clone();
  ASSERT_TRUE((*straight)->Step(Gradient(start, 0.1)).ok());
  EXPECT_FALSE(at::equal(shared, before));
}

// A gradient of another dtype is converted (the caller's tensor is left as it was); the step is
// the same as with the gradient in the parameters' dtype.
TEST(TrainerTest, AGradientOfAnotherDTypeIsConvertedNotWrittenTo) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kSgd;
  spec.learning_rate = 1.0;
  spec.gradient_clip_norm = 0.5;
  std::vector<at::Tensor> start = Parameters(9);
  auto narrow = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
  auto wide = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
  ASSERT_TRUE(narrow.ok() && wide.ok());
  std::vector<at::Tensor> g32, g64;
  for (const at::Tensor& t : Gradient(start, 3.0)) {
    g32.push_back(t.to(at::kFloat));
    g64.push_back(t.to(at::kFloat).to(at::kDouble));
  }
  std::vector<at::Tensor> g32_before;
  for (const at::Tensor& t : g32) g32_before.push_back(t.clone());
  ASSERT_TRUE((*narrow)->Step(g32).ok());
  ASSERT_TRUE((*wide)->Step(g64).ok());
  for (size_t i = 0; i < g32.size(); ++i) {
    EXPECT_TRUE(at::equal(g32[i], g32_before[i])) << i;  // converted, then clipped: not in place
    EXPECT_TRUE(at::equal((*narrow)->parameters()[i], (*wide)->parameters()[i])) << i;
  }
}

TEST(TrainerTest, SetParametersRefusesAShapeMismatchAndChangesNothing) {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kSgd;
  spec.learning_rate = 0.1;
  std::vector<at::Tensor> start = Parameters(8);
  auto trainer = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
  ASSERT_TRUE(trainer.ok()) << trainer.status();

  std::vector<at::Tensor> values = Parameters(9);
  values.back() = at::zeros({values.back().numel() + 1}, at::kDouble);
  absl::Status set = (*trainer)->SetParameters(values);
  EXPECT_EQ(set.code(), absl::StatusCode::kInvalidArgument) << set;
  EXPECT_THAT(set.message(), HasSubstr((*trainer)->names().back()));
  // Not even the tensors before the bad one were overwritten.
  for (size_t i = 0; i < start.size(); ++i)
    EXPECT_TRUE(at::equal((*trainer)->parameters()[i], start[i])) << i;

  values.pop_back();
  EXPECT_EQ((*trainer)->SetParameters(values).code(), absl::StatusCode::kInvalidArgument);
  for (size_t i = 0; i < start.size(); ++i)
    EXPECT_TRUE(at::equal((*trainer)->parameters()[i], start[i])) << i;
}

TEST(TrainerTest, OptimizerStateAloneRoundTrips) {
  for (bool adamw : {true, false}) {
    OptimizerSettings spec;
    if (adamw)
      spec.kind = OptimizerSettings::Kind::kAdamW;
    else {
      spec.kind = OptimizerSettings::Kind::kSgd;
      spec.momentum = 0.8;
    }
    spec.learning_rate = 0.01;
    spec.warmup_steps = 4;
    std::vector<at::Tensor> start = Parameters(10);
    auto original = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
    ASSERT_TRUE(original.ok()) << original.status();
    ASSERT_TRUE((*original)->Step(Gradient(start, 0.1)).ok());
    ASSERT_TRUE((*original)->Step(Gradient(start, -0.2)).ok());
    const std::string path =
        testing_util::TempPath(adamw ? "inner_adamw.safetensors" : "inner_sgd.safetensors");
    ASSERT_TRUE((*original)->SaveOptimizerState(path).ok());

    // A trainer at other values (a worker's next round) takes the state on.
    std::vector<at::Tensor> next = Parameters(11);
    auto restored = Trainer::Create(Tiny(), performer::DType::kFloat64, next, spec);
    ASSERT_TRUE((*restored)->LoadOptimizerState(path).ok());
    EXPECT_EQ((*restored)->steps(), 2);
    ASSERT_TRUE((*original)->SetParameters(next).ok());
    absl::StatusOr<StepResult> a = (*original)->Step(Gradient(start, 0.3));
    absl::StatusOr<StepResult> b = (*restored)->Step(Gradient(start, 0.3));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_DOUBLE_EQ(b->learning_rate, 0.01 * 3 / 4);  // warm-up continues at step 3
    EXPECT_DOUBLE_EQ(a->learning_rate, b->learning_rate);
    double moved = 0;
    for (size_t i = 0; i < next.size(); ++i) {
      EXPECT_TRUE(at::allclose((*restored)->parameters()[i], (*original)->parameters()[i], 1e-12, 1e-15))
          << adamw << " " << i;
      moved += ((*restored)->parameters()[i] - next[i]).abs().sum().item<double>();
    }
    EXPECT_GT(moved, 0) << adamw;

    // Without the state the same step comes out otherwise (the state mattered).
    auto fresh = Trainer::Create(Tiny(), performer::DType::kFloat64, next, spec);
    ASSERT_TRUE((*fresh)->Step(Gradient(start, 0.3)).ok());
    double apart = 0;
    for (size_t i = 0; i < next.size(); ++i) {
      apart = std::max(apart,
                       ((*fresh)->parameters()[i] - (*restored)->parameters()[i]).abs().max().item<double>());
    }
    EXPECT_GT(apart, 1e-6) << adamw;
  }
}

}  // namespace
}  // namespace slimfit::performer
