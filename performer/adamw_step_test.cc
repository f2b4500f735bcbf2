#include "performer/adamw_step.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/optim.h>

#include <cstdint>
#include <vector>

namespace slimfit::performer {
namespace {

struct Case {
  at::ScalarType dtype;
  double weight_decay;
  double gradient_scale;
  double rtol, atol;
};

// Several steps of AdamWStep against torch::optim::AdamW on the same parameter and gradients
// (LibTorch's path scales the gradient in place first, as a clipping trainer does): parameters and
// both moments agree to rounding at every step. 100,003 elements: several parallel blocks and a
// ragged end.
TEST(AdamWStepTest, EqualsLibTorchsAdamWStepByStep) {
  const std::vector<Case> cases = {
      {at::kFloat, 0.0, 1.0, 1e-5, 1e-7},
      {at::kFloat, 0.1, 0.25, 1e-5, 1e-7},
      {at::kDouble, 0.01, 0.5, 1e-12, 1e-15},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.dtype << " wd " << c.weight_decay << " scale " << c.gradient_scale);
    at::manual_seed(3);
    const at::Tensor start = at::randn({100003}, at::TensorOptions(c.dtype));
    at::Tensor reference = start.clone().set_requires_grad(true);
    at::Tensor fused = start.clone();
    at::Tensor exp_avg = at::zeros_like(fused), exp_avg_sq = at::zeros_like(fused);
    AdamWHyperparameters hyper;
    hyper.learning_rate = 1e-2;
    hyper.beta1 = 0.8;
    hyper.beta2 = 0.95;
    hyper.epsilon = 1e-6;
    hyper.weight_decay = c.weight_decay;
    torch::optim::AdamW optimizer({reference}, torch::optim::AdamWOptions(hyper.learning_rate)
                                                   .betas({hyper.beta1, hyper.beta2})
                                                   .eps(hyper.epsilon)
                                                   .weight_decay(hyper.weight_decay));
    for (int64_t step = 1; step <= 4; ++step) {
      const at::Tensor gradient = at::randn_like(start) * (step == 2 ? 1e-3 : 1.0);
      reference.mutable_grad() = gradient.clone().mul_(c.gradient_scale);
      optimizer.step();
      AdamWStep(fused, gradient, exp_avg, exp_avg_sq, step, hyper, c.gradient_scale);
      const auto& state =
          static_cast<const torch::optim::AdamWParamState&>(*optimizer.state().begin()->second);
      EXPECT_TRUE(at::allclose(fused, reference.detach(), c.rtol, c.atol)) << "step " << step;
      EXPECT_TRUE(at::allclose(exp_avg, state.exp_avg(), c.rtol, c.atol)) << "step " << step;
      EXPECT_TRUE(at::allclose(exp_avg_sq, state.exp_avg_sq(), c.rtol, c.atol)) << "step " << step;
      EXPECT_FALSE(at::equal(fused, start));
    }
  }
}

// The same step whatever the number of threads: each element is its own computation.
TEST(AdamWStepTest, IndependentOfTheThreadCount) {
  at::manual_seed(5);
  const at::Tensor start = at::randn({70001});
  const at::Tensor gradient = at::randn_like(start);
  std::vector<at::Tensor> results;
  const int threads = at::get_num_threads();
  for (const int n : {1, 2}) {
    at::set_num_threads(n);
    at::Tensor p = start.clone(), m = at::zeros_like(p), v = at::zeros_like(p);
    AdamWStep(p, gradient, m, v, 1, AdamWHyperparameters{}, 1.0);
    AdamWStep(p, gradient, m, v, 2, AdamWHyperparameters{}, 1.0);
    results.push_back(p);
  }
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(results[0], results[1]));
}

TEST(AdamWStepTest, TakesOnlyContiguousCpuTensorsOfOneFloatingDtype) {
  const at::Tensor p = at::zeros({8});
  EXPECT_TRUE(AdamWStepApplies(p, at::zeros({8}), at::zeros({8}), at::zeros({8})));
  EXPECT_TRUE(AdamWStepApplies(at::zeros({2, 4}), at::zeros({8}), at::zeros({8}), at::zeros({2, 4})));
  EXPECT_FALSE(AdamWStepApplies(p, at::zeros({8}, at::kDouble), at::zeros({8}), at::zeros({8})));
  EXPECT_FALSE(AdamWStepApplies(p, at::zeros({16}).slice(0, 0, 16, 2), at::zeros({8}), at::zeros({8})));
  EXPECT_FALSE(AdamWStepApplies(p, at::zeros({7}), at::zeros({8}), at::zeros({8})));
  EXPECT_FALSE(AdamWStepApplies(p, at::Tensor(), at::zeros({8}), at::zeros({8})));
  EXPECT_FALSE(AdamWStepApplies(at::zeros({8}, at::kBFloat16), at::zeros({8}, at::kBFloat16),
                                at::zeros({8}, at::kBFloat16), at::zeros({8}, at::kBFloat16)));
  at::Tensor q = at::zeros({8}), m = at::zeros({8}), v = at::zeros({8});
  EXPECT_THROW(AdamWStep(q, at::zeros({8}, at::kDouble), m, v, 1, AdamWHyperparameters{}), c10::Error);
  EXPECT_THROW(AdamWStep(q, at::zeros({8}), m, v, 0, AdamWHyperparameters{}), c10::Error);
}

}  // namespace
}  // namespace slimfit::performer
