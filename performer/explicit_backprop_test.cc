// The hand-written forward and backward (GradientOptions::explicit_backprop) give autograd's
// gradient: for every configuration it serves, every front policy, full and sliced, slices with
// several documents, slices that predict nothing — compared with the same call through autograd
// (to 1e-11 in float64, to float32 rounding in float32, and with bfloat16 products far inside
// bfloat16's rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

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
// policy drift by ~1e-3, BENCHMARKS.md "How close are sliced gradients to full back-propagation?")
// the two float32 paths differ from each other as much as from the truth, so the hand-written path
// must be as close to the truth as autograd is.
void ExpectByHandEqualsAutograd(const PerformerModel& model, const PerformerModel& model64,
                                const PackedBatch& batch, const Plan& plan) {
  const std::string what = plan.DebugString();
  const GradientResult by_hand = MustCompute(model, batch, plan, Options(true));
  const GradientResult autograd = MustCompute(model, batch, plan, Options(false));
  EXPECT_TRUE(by_hand.explicit_backprop) << what;
  EXPECT_FALSE(autograd.explicit_backprop) << what;
  EXPECT_EQ(by_hand.slice_forwards, autograd.slice_forwards) << what;
  ASSERT_EQ(by_hand.gradients.size(), autograd.gradients.size()) << what;
  if (plan.dtype == DType::kFloat64) {
    EXPECT_LE(RelativeDiscrepancy(by_hand.gradients, autograd.gradients), 1e-11) << what;
    for (size_t i = 0; i < autograd.gradients.size(); ++i) {  // each parameter, on its own scale
      const double scale = autograd.gradients[i].abs().max().item<double>();
      const double difference = (by_hand.gradients[i] - autograd.gradients[i]).abs().max().item<double>();
      EXPECT_LE(difference, 1e-10 * scale + 1e-30) << what << ": parameter " << model.names()[i];
    }
    EXPECT_NEAR(by_hand.loss_sum, autograd.loss_sum, 1e-11 * autograd.loss_sum) << what;
    return;
  }
  Plan plan64 = plan;
  plan64.dtype = DType::kFloat64;
  const GradientResult truth = MustCompute(model64, batch, plan64, Options(true));
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

PerformerModel Float64Twin(const PerformerModel& model) {
  absl::StatusOr<PerformerModel> twin =
      PerformerModel::FromTensors(model.config(), model.StateDict(), DType::kFloat64, at::kCPU);
  EXPECT_TRUE(twin.ok()) << twin.status();
  return *std::move(twin);
}

TEST_P(ExplicitBackpropTest, EqualsAutogradForEveryPolicyAndSlice) {
  const auto [map, layernorm, dtype] = GetParam();
  const PerformerModel model = MustCreateModel(SmallEngineConfig(map, layernorm), dtype, 5);
  const PerformerModel model64 = Float64Twin(model);
  const PackedBatch batch = FiveDocumentStream(model.config().vocab);
  for (FrontPolicy policy :
       {FrontPolicy::kReverse, FrontPolicy::kStore, FrontPolicy::kResync, FrontPolicy::kDp}) {
    // 48: every slice's weight-gradient rows split across two batches (BatchedWeightGradients).
    for (int64_t slice : {0, 1, 5, 16, 48}) {
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
      ExpectByHandEqualsAutograd(model, model64, batch, plan);
    }
  }
  // Blocks of 8 rows: segments of many blocks in the prefix sums' forward and backward.
  for (int64_t slice : {0, 16}) {
    Plan plan;
    plan.dtype = dtype;
    plan.slice = slice;
    plan.block = 8;
    ExpectByHandEqualsAutograd(model, model64, batch, plan);
  }
}

INSTANTIATE_TEST_SUITE_P(Served, ExplicitBackpropTest,
                         ::testing::Combine(::testing::Values(FeatureMap::kRelu, FeatureMap::kElu1,
                                                              FeatureMap::kSqr, FeatureMap::kFavor),
                                            ::testing::Values(LayerNormPlacement::kPost,
                                                              LayerNormPlacement::kPre),
                                            ::testing::Values(DType::kFloat64, DType::kFloat32)),
                         [](const ::testing::TestParamInfo<ServedCase>& info) {
                           std::string name = absl::StrCat(FeatureMapName(std::get<0>(info.param)), "_",
                                                           LayerNormPlacementName(std::get<1>(info.param)),
                                                           "_", DTypeName(std::get<2>(info.param)));
                           for (char& c : name) {
                             if (c == '+') c = 'p';
                           }
                           return name;
                         });

// From 512 rows on the float32 path leaves LayerNorm, GELU and the bias sums to LibTorch's kernels
// (explicit_backprop.cc): a full gradient of 700 rows, and slices of 600 (one over the limit, one
// under), in both LayerNorm placements.
TEST(ExplicitBackpropLongStretchTest, RowsAboveTheKernelLimitEqualAutograd) {
  PackedBatch batch;
  for (int64_t i = 0; i < 700; ++i) batch.tokens.push_back((i * 7 + i / 9) % 37);
  batch.doc_starts = {0, 300, 301, 650};
  for (LayerNormPlacement ln : {LayerNormPlacement::kPost, LayerNormPlacement::kPre}) {
    const PerformerModel model = MustCreateModel(SmallEngineConfig(FeatureMap::kSqr, ln), DType::kFloat32, 5);
    const PerformerModel model64 = Float64Twin(model);
    for (int64_t slice : {0, 600}) {
      Plan plan;
      plan.slice = slice;
      ExpectByHandEqualsAutograd(model, model64, batch, plan);
    }
  }
}

// Slices by hand through the replay path (SliceReplay::kRerun, the CPU form of CUDA graphs'
// bookkeeping) give the direct result.
TEST(ExplicitBackpropReplayTest, RerunReplaysGiveTheDirectGradient) {
  const PerformerModel model = MustCreateModel(SmallEngineConfig(FeatureMap::kElu1), DType::kFloat64, 5);
  const PackedBatch batch = FiveDocumentStream(model.config().vocab);
  for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore}) {
    Plan plan;
    plan.dtype = DType::kFloat64;
    plan.slice = 7;
    plan.front_policy = policy;
    GradientOptions replay = Options(true);
    replay.slice_replay = SliceReplay::kRerun;
    const GradientResult direct = MustCompute(model, batch, plan, Options(true));
    const GradientResult replayed = MustCompute(model, batch, plan, replay);
    EXPECT_TRUE(replayed.explicit_backprop);
    EXPECT_GT(replayed.replayed_slices, 0);
    EXPECT_LE(RelativeDiscrepancy(replayed.gradients, direct.gradients), 1e-12) << plan.DebugString();
    EXPECT_NEAR(replayed.loss_sum, direct.loss_sum, 1e-12 * direct.loss_sum);
  }
}

// What the hand-written path does not serve runs through autograd, whatever the option says.
TEST(ExplicitBackpropScopeTest, CumsumAndLayerRecomputationKeepAutograd) {
  const PackedBatch batch = FiveDocumentStream(37);
  struct Case {
    FeatureMap map;
    PrefixMode mode;
    LayerRecompute recompute;
  };
  for (const Case& c : {Case{FeatureMap::kFavor, PrefixMode::kCumsum, LayerRecompute::kNone},
                        Case{FeatureMap::kSqr, PrefixMode::kCumsum, LayerRecompute::kNone},
                        Case{FeatureMap::kFavor, PrefixMode::kChunked, LayerRecompute::kLayers}}) {
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
  // And served plans do run by hand, every feature map.
  for (FeatureMap map : {FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr, FeatureMap::kFavor}) {
    absl::StatusOr<PerformerModel> model =
        PerformerModel::Create(SmallEngineConfig(map), DType::kFloat64, at::kCPU, 5);
    ASSERT_TRUE(model.ok()) << model.status();
    Plan plan;
    plan.dtype = DType::kFloat64;
    plan.slice = 8;
    EXPECT_TRUE(MustCompute(*model, batch, plan, Options(true)).explicit_backprop) << FeatureMapName(map);
  }
}

// FAVOR+ with projections the caller gives (GradientOptions::favor_projections) instead of a seed:
// by hand and through autograd use the same ones.
TEST(ExplicitBackpropFavorTest, GivenProjectionsEqualAutograd) {
  const PerformerModel model = MustCreateModel(SmallEngineConfig(FeatureMap::kFavor), DType::kFloat64, 7);
  const PackedBatch batch = FiveDocumentStream(model.config().vocab);
  for (int64_t slice : {0, 6}) {
    Plan plan;
    plan.dtype = DType::kFloat64;
    plan.slice = slice;
    GradientOptions by_hand = Options(true);
    by_hand.favor_projections =
        SampleFavorProjections(model.config(), 11, at::TensorOptions().dtype(at::kDouble));
    GradientOptions autograd = by_hand;
    autograd.explicit_backprop = false;
    const GradientResult a = MustCompute(model, batch, plan, by_hand);
    const GradientResult b = MustCompute(model, batch, plan, autograd);
    const GradientResult seeded = MustCompute(model, batch, plan, Options(true));
    EXPECT_TRUE(a.explicit_backprop);
    EXPECT_LE(RelativeDiscrepancy(a.gradients, b.gradients), 1e-11) << plan.DebugString();
    EXPECT_GT(RelativeDiscrepancy(a.gradients, seeded.gradients), 1e-6)
        << "the given projections were not used";
  }
}

// bfloat16 products (Plan::bf16_products) by hand: the same products, rounded at the same points as
// autograd's linear maps (matrix_products.h: operands, bias and product in bfloat16, the gradient
// sums in float32). The two paths then differ only where float32 rounding elsewhere (the row
// kernels against LibTorch's, sums in another order) tips an operand to a neighbouring bfloat16
// value: far inside the rounding that each shows against the float32 gradient (at most a tenth of
// it; measured 1e-8 to 4.5e-2 of it, the most at C = 1 and 16).
TEST(ExplicitBackpropBf16Test, Bf16ProductsEqualAutogradsBf16Products) {
  for (FeatureMap map : {FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr, FeatureMap::kFavor}) {
    for (LayerNormPlacement layernorm : {LayerNormPlacement::kPost, LayerNormPlacement::kPre}) {
      const PerformerModel model = MustCreateModel(SmallEngineConfig(map, layernorm), DType::kFloat32, 5);
      const PackedBatch batch = FiveDocumentStream(model.config().vocab);
      const GradientResult float32 = MustCompute(model, batch, Plan(), Options(true));
      for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore}) {
        for (int64_t slice : {0, 1, 16, 48}) {
          if (policy != FrontPolicy::kReverse && slice != 16) continue;
          Plan plan;
          plan.slice = slice;
          plan.front_policy = policy;
          plan.bf16_products = true;
          const std::string what = absl::StrCat(FeatureMapName(map), " ", LayerNormPlacementName(layernorm),
                                                " ", plan.DebugString());
          const GradientResult by_hand = MustCompute(model, batch, plan, Options(true));
          const GradientResult autograd = MustCompute(model, batch, plan, Options(false));
          EXPECT_TRUE(by_hand.explicit_backprop) << what;
          EXPECT_FALSE(autograd.explicit_backprop) << what;
          EXPECT_EQ(by_hand.slice_forwards, autograd.slice_forwards) << what;
          const double rounding = RelativeDiscrepancy(autograd.gradients, float32.gradients);
          EXPECT_GT(rounding, 1e-4) << what << ": no bfloat16 rounding seen";
          // Within what spot checks allow a bfloat16 job (server/spot_checks.h); relu under the
          // reverse policy at C = 1 comes closest (2.1e-2: its fronts drift, as in float32).
          EXPECT_LT(rounding, 3e-2) << what;
          EXPECT_GT(RelativeDiscrepancy(by_hand.gradients, float32.gradients), 1e-4) << what;
          EXPECT_LE(RelativeDiscrepancy(by_hand.gradients, autograd.gradients), 0.1 * rounding)
              << what << " (bfloat16 against float32: " << rounding << ")";
          EXPECT_NEAR(by_hand.loss_sum, autograd.loss_sum, 1e-5 * autograd.loss_sum) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace slimfit::performer
