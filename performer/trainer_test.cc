#include "performer/trainer.h"

#include <cmath>

#include <ATen/ATen.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "performer/performer_model.h"
#include "base/test_util.h"

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
  v1::Optimizer spec;
  spec.mutable_sgd();
  spec.set_learning_rate(0.5);
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
  v1::Optimizer spec;
  spec.mutable_adamw();
  spec.set_learning_rate(0.01);
  spec.set_weight_decay(0.1);
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

TEST(TrainerTest, WarmupAndClipping) {
  v1::Optimizer spec;
  spec.mutable_sgd();
  spec.set_learning_rate(1.0);
  spec.set_warmup_steps(4);
  spec.set_gradient_clip_norm(1.0);
  std::vector<at::Tensor> before = Parameters(3);
  auto trainer = Trainer::Create(Tiny(), performer::DType::kFloat64, before, spec);
  std::vector<at::Tensor> g = Gradient(before, 10.0);
  absl::StatusOr<StepResult> step = (*trainer)->Step(g);
  ASSERT_TRUE(step.ok());
  EXPECT_DOUBLE_EQ(step->learning_rate, 0.25);
  double norm = 0;
  for (const at::Tensor& t : g) norm += t.pow(2).sum().item<double>();
  norm = std::sqrt(norm);
  EXPECT_NEAR(step->gradient_norm, norm, 1e-9);
  // The update has norm lr · 1 (clipped).
  double moved = 0;
  for (size_t i = 0; i < before.size(); ++i) moved += ((*trainer)->parameters()[i] - before[i]).pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(moved), 0.25, 1e-6);
  for (int s = 2; s <= 5; ++s) step = (*trainer)->Step(Gradient(before, 0.01));
  EXPECT_DOUBLE_EQ(step->learning_rate, 1.0);
}

TEST(TrainerTest, SavedOptimizerStateResumesExactly) {
  for (bool adamw : {true, false}) {
    v1::Optimizer spec;
    if (adamw) spec.mutable_adamw(); else spec.mutable_sgd()->set_momentum(0.9);
    spec.set_learning_rate(0.01);
    std::vector<at::Tensor> start = Parameters(4);
    auto straight = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
    auto first = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
    for (int s = 1; s <= 3; ++s) {
      ASSERT_TRUE((*straight)->Step(Gradient(start, 0.1 * s)).ok());
      if (s <= 2) ASSERT_TRUE((*first)->Step(Gradient(start, 0.1 * s)).ok());
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
          << adamw << " " << i << " " << ((*resumed)->parameters()[i] - (*straight)->parameters()[i]).abs().max().item<double>();
    }
    // The wrong optimizer kind is refused.
    v1::Optimizer other = spec;
    if (adamw) other.mutable_sgd(); else other.mutable_adamw();
    auto mismatched = Trainer::Create(Tiny(), performer::DType::kFloat64, start, other);
    EXPECT_THAT((*mismatched)->LoadOptimizerState(optimizer).message(), HasSubstr("optimizer state is not"));
  }
}

TEST(TrainerTest, ValidationNamesTheField) {
  v1::Optimizer spec;
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("spec.optimizer.kind"));
  spec.mutable_adamw()->set_beta1(1.0);
  spec.set_learning_rate(0.1);
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("spec.optimizer.adamw.beta1"));
  spec.mutable_sgd()->set_nesterov(true);
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("spec.optimizer.sgd.nesterov"));
  spec.mutable_sgd()->set_nesterov(false);
  spec.set_learning_rate(0);
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("spec.optimizer.learning_rate"));
}

TEST(TrainerTest, NonFiniteGradientChangesNothing) {
  v1::Optimizer spec;
  spec.mutable_sgd();
  spec.set_learning_rate(0.1);
  std::vector<at::Tensor> start = Parameters(5);
  auto trainer = Trainer::Create(Tiny(), performer::DType::kFloat64, start, spec);
  std::vector<at::Tensor> g = Gradient(start, 1.0);
  g[0][0] = std::nan("");
  EXPECT_EQ((*trainer)->Step(g).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*trainer)->steps(), 0);
  EXPECT_TRUE(at::equal((*trainer)->parameters()[1], start[1]));
}

}  // namespace
}  // namespace slimfit::performer
