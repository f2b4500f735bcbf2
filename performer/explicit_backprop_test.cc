// The hand-written forward and backward (GradientOptions::explicit_backprop) give autograd's
// gradient: for every configuration it serves, every front policy, full and sliced, slices with
// several documents, slices that predict nothing — compared with the same call through autograd
// (to 1e-11 in float64, to float32 rounding in float32).
#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine.h"
#include "performer/gradient_engine_test_cases.h"

namespace slimfit::performer {
namespace {

GradientOptions Options(bool explicit_backprop) {
  GradientOptions options;
  options.feature_seed = 3;
  options.explicit_backprop = explicit_backprop;
  options.dp_schedule = [](const Plan&, int64_t slices) { return KeepEveryFront(slices); };
  return options;
}

using ServedCase = std::tuple<FeatureMap, LayerNormPlacement, DType>;

class ExplicitBackpropTest : public ::testing::TestWithParam<ServedCase> {};

// In float64 the two paths agree to 1e-11. In float32 both are compared with the float64 gradient
// of the same model: where a plan is ill-conditioned in float32 (relu features under the reverse
// policy drift by ~1e-3, BENCHMARKS.md "Front policies on a long float32 run") the two float32
// paths differ from each other as much as from the truth, so the hand-written path must be as
// close to the truth as autograd is.
TEST_P(ExplicitBackpropTest, EqualsAutogradForEveryPolicyAndSlice) {
  const auto [map, layernorm, dtype] = GetParam();
  const ModelConfig config = SmallEngineConfig(map, layernorm);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, dtype, at::kCPU, 5);
  ASSERT_TRUE(model.ok()) << model.status();
  const bool float32 = dtype == DType::kFloat32;
  absl::StatusOr<PerformerModel> model64 =
      PerformerModel::FromTensors(config, model->StateDict(), DType::kFloat64, at::kCPU);
  ASSERT_TRUE(model64.ok()) << model64.status();
  const PackedBatch batch = FiveDocumentStream(config.vocab);
  for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore, FrontPolicy::kResync, FrontPolicy::kDp}) {
    for (int64_t slice : {0, 1, 5, 16}) {
      if (slice == 0 && policy != FrontPolicy::kReverse) continue;  // the full gradient has no policy
      Plan plan;
      plan.dtype = dtype;
      plan.slice = slice;
      plan.front_policy = policy;
      plan.resync_every = 3;
      if (policy == FrontPolicy::kDp) {
        plan.schedule = ScheduleKind::kHsm;
        plan.slots = 120;
      }
      const std::string what = plan.DebugString();
      const GradientResult by_hand = MustCompute(*model, batch, plan, Options(true));
      const GradientResult autograd = MustCompute(*model, batch, plan, Options(false));
      EXPECT_TRUE(by_hand.explicit_backprop) << what;
      EXPECT_FALSE(autograd.explicit_backprop) << what;
      EXPECT_EQ(by_hand.slice_forwards, autograd.slice_forwards) << what;
      ASSERT_EQ(by_hand.gradients.size(), autograd.gradients.size()) << what;
      if (!float32) {
        EXPECT_LE(RelativeDiscrepancy(by_hand.gradients, autograd.gradients), 1e-11) << what;
        for (size_t i = 0; i < autograd.gradients.size(); ++i) {  // each parameter, on its own scale
          const double scale = autograd.gradients[i].abs().max().item<double>();
          const double difference = (by_hand.gradients[i] - autograd.gradients[i]).abs().max().item<double>();
          EXPECT_LE(difference, 1e-10 * scale + 1e-30) << what << ": parameter " << model->names()[i];
        }
        EXPECT_NEAR(by_hand.loss_sum, autograd.loss_sum, 1e-11 * autograd.loss_sum) << what;
        continue;
      }
      Plan plan64 = plan;
      plan64.dtype = DType::kFloat64;
      const GradientResult truth = MustCompute(*model64, batch, plan64, Options(true));
      auto error = [&](const GradientResult& result) {
        std::vector<at::Tensor> widened;
        for (const at::Tensor& g : result.gradients) widened.push_back(g.to(at::kDouble));
        return RelativeDiscrepancy(widened, truth.gradients);
      };
      const double autograd_error = error(autograd);
      EXPECT_LE(error(by_hand), std::max(1e-5, 3 * autograd_error))
          << what << " (autograd's: " << autograd_error << ")";
      EXPECT_NEAR(by_hand.loss_sum, truth.loss_sum, 1e-5 * truth.loss_sum) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Served, ExplicitBackpropTest,
    ::testing::Combine(::testing::Values(FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr),
                       ::testing::Values(LayerNormPlacement::kPost, LayerNormPlacement::kPre),
                       ::testing::Values(DType::kFloat64, DType::kFloat32)),
    [](const ::testing::TestParamInfo<ServedCase>& info) {
      std::string name = absl::StrCat(FeatureMapName(std::get<0>(info.param)), "_",
                                      LayerNormPlacementName(std::get<1>(info.param)), "_",
                                      DTypeName(std::get<2>(info.param)));
      for (char& c : name) {
        if (c == '+') c = 'p';
      }
      return name;
    });

// What the hand-written path does not serve runs through autograd, whatever the option says.
TEST(ExplicitBackpropScopeTest, FavorCumsumAndLayerRecomputationKeepAutograd) {
  const PackedBatch batch = FiveDocumentStream(37);
  struct Case {
    FeatureMap map;
    PrefixMode mode;
    LayerRecompute recompute;
  };
  for (const Case& c : {Case{FeatureMap::kFavor, PrefixMode::kChunked, LayerRecompute::kNone},
                        Case{FeatureMap::kSqr, PrefixMode::kCumsum, LayerRecompute::kNone},
                        Case{FeatureMap::kSqr, PrefixMode::kChunked, LayerRecompute::kLayers}}) {
    absl::StatusOr<PerformerModel> model =
        PerformerModel::Create(SmallEngineConfig(c.map), DType::kFloat64, at::kCPU, 5);
    ASSERT_TRUE(model.ok()) << model.status();
    Plan plan;
    plan.dtype = DType::kFloat64;
    plan.slice = 8;
    plan.prefix_mode = c.mode;
    plan.recompute = c.recompute;
    const GradientResult result = MustCompute(*model, batch, plan, Options(true));
    EXPECT_FALSE(result.explicit_backprop) << plan.DebugString();
  }
  // And a served plan does run by hand.
  absl::StatusOr<PerformerModel> model =
      PerformerModel::Create(SmallEngineConfig(FeatureMap::kSqr), DType::kFloat64, at::kCPU, 5);
  ASSERT_TRUE(model.ok()) << model.status();
  Plan plan;
  plan.dtype = DType::kFloat64;
  plan.slice = 8;
  EXPECT_TRUE(MustCompute(*model, batch, plan, Options(true)).explicit_backprop);
}

}  // namespace
}  // namespace slimfit::performer
