#include "performer/gradient_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine_test_cases.h"

namespace slimfit::performer {
namespace {

using ::testing::HasSubstr;

// 40 tokens in five documents, one of a single token; boundaries fall inside slices for most C.
PackedBatch PackedStream(int64_t vocab) {
  PackedBatch batch;
  for (int64_t i = 0; i < 40; ++i) batch.tokens.push_back((i * 7 + 3 * (i / 5)) % vocab);
  batch.doc_starts = {0, 11, 12, 20, 30};
  return batch;
}

// ‖·‖₂ of all the tensors as one vector.
double NormOfAll(const std::vector<at::Tensor>& tensors) {
  double sum = 0;
  for (const at::Tensor& t : tensors) sum += t.to(at::kDouble).pow(2).sum().item<double>();
  return std::sqrt(sum);
}

Plan SlicedPlan(int64_t slice, DType dtype = DType::kFloat32) {
  Plan plan;
  plan.slice = slice;
  plan.dtype = dtype;
  return plan;
}

class SlicedEqualsFullTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(SlicedEqualsFullTest, EveryCGivesTheFullGradientAndLoss) {
  const auto [map, ln, mode, dtype] = GetParam();
  const ModelConfig config = SmallEngineConfig(map, ln);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, dtype, at::kCPU, /*seed=*/7);
  ASSERT_TRUE(model.ok()) << model.status();
  const PackedBatch batch = PackedStream(config.vocab);
  const int64_t length = batch.size();
  const double tolerance = dtype == DType::kFloat64 ? 1e-10 : 1e-5;

  Plan full;
  full.dtype = dtype;
  full.prefix_mode = mode;
  full.block = 4;
  GradientOptions options;
  options.feature_seed = 11;
  const GradientResult reference = MustCompute(*model, batch, full, options);
  ASSERT_EQ(reference.token_count, length - 5);
  ASSERT_GT(NormOfAll(reference.gradients), 0.0);

  for (int64_t slice : {int64_t{1}, int64_t{3}, int64_t{7}, length / 2, length}) {
    // Blocks that divide C and blocks that do not.
    for (int64_t block : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}}) {
      if (mode == PrefixMode::kCumsum && block != 1) continue;  // block is unused by cumsum
      Plan plan = full;
      plan.slice = slice;
      plan.block = block;
      const GradientResult sliced = MustCompute(*model, batch, plan, options);
      const int64_t slices = (length + slice - 1) / slice;
      // 2N − 1, and what keeping the fronts precise cost (x²'s random small-model features grow
      // unevenly at small C: some features of the first fronts are far below the later ones').
      EXPECT_EQ(sliced.slice_forwards, 2 * slices - 1 + sliced.conditioning_forwards) << "C=" << slice;
      if (sliced.conditioning_forwards > 0) {
        EXPECT_GT(sliced.conditioning_fronts + sliced.conditioning_fronts_recomputed, 0) << "C=" << slice;
      }
      EXPECT_LE(RelativeDiscrepancy(sliced.gradients, reference.gradients), tolerance)
          << "C=" << slice << " block=" << block;
      EXPECT_NEAR(sliced.loss_sum, reference.loss_sum, tolerance * std::abs(reference.loss_sum))
          << "C=" << slice << " block=" << block;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllConfigurations, SlicedEqualsFullTest, EveryEngineCase(), EngineCaseName);

// The contiguous forward copies of the FFN and output weights (Plan::copy_forward_weights) change
// the speed and the memory, never the result beyond float32 rounding; the memory they add is
// exactly those weights' bytes.
TEST(GradientEngineTest, ForwardWeightCopiesChangeMemoryNotTheGradient) {
  if (!CopiesForwardLayouts(at::kCPU, DType::kFloat32)) GTEST_SKIP() << "no oneDNN: one weight layout only";
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model =
      PerformerModel::Create(config, DType::kFloat32, at::kCPU, /*seed=*/7);
  ASSERT_TRUE(model.ok()) << model.status();
  const PackedBatch batch = PackedStream(config.vocab);
  for (int64_t slice : {int64_t{0}, int64_t{7}}) {
    Plan with = SlicedPlan(slice);
    Plan without = with;
    without.copy_forward_weights = false;
    const GradientResult a = MustCompute(*model, batch, with, {});
    const GradientResult b = MustCompute(*model, batch, without, {});
    EXPECT_LE(RelativeDiscrepancy(a.gradients, b.gradients), 1e-6) << "C=" << slice;
    EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-6 * std::abs(b.loss_sum));
    // The copies, less at most the one-layout path's transposed product buffer (rows × out).
    const int64_t copies = (config.forward_layout_values(true) - config.forward_layout_values(false)) * 4;
    const int64_t difference = (a.peak_bytes - a.start_bytes) - (b.peak_bytes - b.start_bytes);
    EXPECT_LE(difference, copies) << "C=" << slice;
    EXPECT_GE(difference, copies - batch.size() * config.d_ff * 4) << "C=" << slice;
  }
}

// The float32 gradient (oneDNN products, forward copies or not, fused prefix sums) against the
// float64 gradient of the same weights (LibTorch's paths): a check of the float32 wiring that does
// not share it — e.g. the q | k | v pieces of the input gradient in the wrong order would be O(1).
TEST(GradientEngineTest, FloatGradientMatchesTheDoubleGradientOfTheSameWeights) {
  for (FeatureMap map : {FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr, FeatureMap::kFavor}) {
    for (LayerNormPlacement ln : {LayerNormPlacement::kPost, LayerNormPlacement::kPre}) {
      const ModelConfig config = SmallEngineConfig(map, ln);
      absl::StatusOr<PerformerModel> f64 =
          PerformerModel::Create(config, DType::kFloat64, at::kCPU, /*seed=*/7);
      ASSERT_TRUE(f64.ok()) << f64.status();
      absl::StatusOr<PerformerModel> f32 =
          PerformerModel::FromTensors(config, f64->StateDict(), DType::kFloat32, at::kCPU);
      ASSERT_TRUE(f32.ok()) << f32.status();
      const PackedBatch batch = PackedStream(config.vocab);
      GradientOptions options;
      options.feature_seed = 11;
      const GradientResult want = MustCompute(*f64, batch, SlicedPlan(0, DType::kFloat64), options);
      for (int64_t slice : {int64_t{0}, int64_t{1}, int64_t{7}}) {
        for (bool copies : {true, false}) {
          Plan plan = SlicedPlan(slice);
          plan.block = 4;
          plan.copy_forward_weights = copies;
          const GradientResult got = MustCompute(*f32, batch, plan, options);
          EXPECT_LE(RelativeDiscrepancy(got.gradients, want.gradients), 1e-5)
              << FeatureMapName(map) << " " << LayerNormPlacementName(ln) << " C=" << slice << " copies "
              << copies;
        }
      }
    }
  }
}

// Mixed precision (Plan::bf16_products): the float32 gradient to bfloat16 rounding at
// every C — fronts and their subtraction stay in float32. Slicing is then gradient accumulation
// over slices in mixed precision: each slice's weight-gradient product is rounded to bfloat16 before
// it is summed in float32, so small C may land a little further from the float32 gradient than the
// full bfloat16 gradient does (up to 2.1× at C = 1 here), never beyond bfloat16's rounding. The
// lower bound checks that the products really ran in bfloat16.
TEST(GradientEngineTest, Bf16ProductsGiveTheFloatGradientToBf16RoundingAtEveryC) {
  for (FeatureMap map : {FeatureMap::kElu1, FeatureMap::kSqr}) {
    const ModelConfig config = SmallEngineConfig(map, LayerNormPlacement::kPre);
    const PerformerModel model = MustCreateModel(config, DType::kFloat32, /*seed=*/5);
    const PackedBatch batch = FiveDocumentStream(config.vocab);
    const GradientResult want = MustCompute(model, batch, SlicedPlan(0));
    Plan full_plan = SlicedPlan(0);
    full_plan.bf16_products = true;
    const GradientResult full = MustCompute(model, batch, full_plan);
    EXPECT_TRUE(full.explicit_backprop);
    const double full_error = RelativeDiscrepancy(full.gradients, want.gradients);
    EXPECT_GT(full_error, 1e-4) << FeatureMapName(map) << ": no bfloat16 rounding seen";
    EXPECT_LT(full_error, 2e-2) << FeatureMapName(map);
    EXPECT_NEAR(full.loss(), want.loss(), 1e-3 * want.loss());
    for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore}) {
      for (int64_t slice : {1, 16, 40}) {
        Plan plan = SlicedPlan(slice);
        plan.front_policy = policy;
        plan.bf16_products = true;
        const GradientResult sliced = MustCompute(model, batch, plan);
        const double error = RelativeDiscrepancy(sliced.gradients, want.gradients);
        EXPECT_LT(error, std::min(3 * full_error, 2e-2))
            << FeatureMapName(map) << " " << FrontPolicyName(policy) << " C=" << slice;
        EXPECT_NEAR(sliced.loss(), want.loss(), 1e-3 * want.loss()) << FeatureMapName(map) << " C=" << slice;
      }
    }
    // The paths that stay on autograd (layer recomputation, cumsum prefix sums) take the same
    // rounded weights.
    for (bool recompute : {true, false}) {
      Plan plan = SlicedPlan(16);
      plan.bf16_products = true;
      if (recompute) {
        plan.recompute = LayerRecompute::kLayers;
      } else {
        plan.prefix_mode = PrefixMode::kCumsum;
      }
      const GradientResult sliced = MustCompute(model, batch, plan);
      EXPECT_FALSE(sliced.explicit_backprop);
      const double error = RelativeDiscrepancy(sliced.gradients, want.gradients);
      EXPECT_GT(error, 1e-4) << FeatureMapName(map) << " " << plan.DebugString();
      EXPECT_LT(error, std::min(3 * full_error, 2e-2)) << FeatureMapName(map) << " " << plan.DebugString();
    }
  }
  const PerformerModel f64 = MustCreateModel(SmallEngineConfig(FeatureMap::kSqr), DType::kFloat64, 5);
  Plan f64_plan = SlicedPlan(0, DType::kFloat64);
  f64_plan.bf16_products = true;
  absl::StatusOr<GradientResult> refused = ComputeGradient(f64, FiveDocumentStream(37), f64_plan, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("float32"));
}

TEST(GradientEngineTest, FrontPoliciesAllGiveTheFullGradient) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 3);
  ASSERT_TRUE(model.ok());
  PackedBatch batch = PackedStream(config.vocab);
  const GradientResult reference = MustCompute(*model, batch, SlicedPlan(0, DType::kFloat64));
  for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore, FrontPolicy::kResync}) {
    Plan plan;
    plan.dtype = DType::kFloat64;
    plan.slice = 3;
    plan.front_policy = policy;
    plan.resync_every = 4;
    const GradientResult sliced = MustCompute(*model, batch, plan);
    EXPECT_LE(RelativeDiscrepancy(sliced.gradients, reference.gradients), 1e-10) << FrontPolicyName(policy);
  }
}

TEST(GradientEngineTest, DpExecutesTheScheduleItIsGiven) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kRelu, LayerNormPlacement::kPre);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 3);
  ASSERT_TRUE(model.ok());
  const PackedBatch batch = PackedStream(config.vocab);
  const GradientResult reference = MustCompute(*model, batch, SlicedPlan(0, DType::kFloat64));
  for (LayerRecompute recompute : {LayerRecompute::kNone, LayerRecompute::kLayers}) {
    Plan plan = SlicedPlan(3, DType::kFloat64);
    plan.front_policy = FrontPolicy::kDp;
    plan.schedule = ScheduleKind::kHsm;
    plan.slots = 14;
    plan.recompute = recompute;
    GradientOptions options;
    int64_t asked_for = 0;
    options.dp_schedule = [&](const Plan&, int64_t slices) {
      asked_for = slices;
      return KeepEveryFront(slices);
    };
    const GradientResult result = MustCompute(*model, batch, plan, options);
    EXPECT_EQ(asked_for, 14);
    EXPECT_EQ(result.slice_forwards, 28);
    EXPECT_EQ(result.stored_fronts_peak, 14);
    EXPECT_LE(RelativeDiscrepancy(result.gradients, reference.gradients), 1e-10) << plan.DebugString();
    EXPECT_NEAR(result.loss_sum, reference.loss_sum, 1e-10 * reference.loss_sum);
  }
}

TEST(GradientEngineTest, DpRefusesAMissingOrUnfitSchedule) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 3);
  ASSERT_TRUE(model.ok());
  const PackedBatch batch = PackedStream(config.vocab);
  Plan plan = SlicedPlan(4, DType::kFloat64);
  plan.front_policy = FrontPolicy::kDp;
  plan.slots = 10;
  absl::Status missing = ComputeGradient(*model, batch, plan, {}).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("dp_schedule"));

  GradientOptions options;
  options.dp_schedule = [](const Plan&, int64_t slices) { return KeepEveryFront(slices - 1); };
  EXPECT_EQ(ComputeGradient(*model, batch, plan, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.dp_schedule = [](const Plan&, int64_t slices) {
    Schedule schedule = KeepEveryFront(slices);
    std::swap(schedule.actions[0], schedule.actions[1]);  // forward before keeping f_0: f_0 is lost
    return schedule;
  };
  absl::Status broken = ComputeGradient(*model, batch, plan, options).status();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(broken.message()), HasSubstr("cannot run"));
  plan.slots = 9;  // keeping all 10 fronts needs 10 slots
  options.dp_schedule = [](const Plan&, int64_t slices) { return KeepEveryFront(slices); };
  EXPECT_EQ(ComputeGradient(*model, batch, plan, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.dp_schedule = [](const Plan&, int64_t) -> absl::StatusOr<Schedule> {
    return absl::ResourceExhaustedError("too many actions");
  };
  plan.slots = 10;
  EXPECT_EQ(ComputeGradient(*model, batch, plan, options).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(GradientEngineTest, LayerRecomputationGivesTheFullGradientUnderEveryPolicy) {
  for (auto [map, ln] : {std::pair{FeatureMap::kRelu, LayerNormPlacement::kPre},
                         std::pair{FeatureMap::kFavor, LayerNormPlacement::kPost}}) {
    const ModelConfig config = SmallEngineConfig(map, ln);
    absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 13);
    ASSERT_TRUE(model.ok());
    const PackedBatch batch = PackedStream(config.vocab);
    const GradientResult reference = MustCompute(*model, batch, SlicedPlan(0, DType::kFloat64));
    for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore}) {
      for (int64_t slice : {int64_t{1}, int64_t{7}, int64_t{40}}) {
        Plan plan = SlicedPlan(slice, DType::kFloat64);
        plan.recompute = LayerRecompute::kLayers;
        plan.front_policy = policy;
        plan.block = 3;
        const GradientResult result = MustCompute(*model, batch, plan);
        EXPECT_LE(RelativeDiscrepancy(result.gradients, reference.gradients), 1e-10) << plan.DebugString();
        EXPECT_NEAR(result.loss_sum, reference.loss_sum, 1e-10 * reference.loss_sum) << plan.DebugString();
      }
    }
  }
  Plan full = SlicedPlan(0, DType::kFloat64);
  full.recompute = LayerRecompute::kLayers;
  EXPECT_EQ(full.Validate(40).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GradientEngineTest, ReverseKeepsOnlyTheFrontsOfSlicesWithDocumentStarts) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 3);
  ASSERT_TRUE(model.ok());
  PackedBatch one_document = PackedStream(config.vocab);
  one_document.doc_starts = {0};
  Plan plan{.slice = 4, .dtype = DType::kFloat64};
  // Beside the fronts kept for precision (conditioning), which stay until the backward sweep.
  auto policy_fronts = [](const GradientResult& result) {
    return result.stored_fronts_peak - result.conditioning_fronts;
  };
  EXPECT_EQ(policy_fronts(MustCompute(*model, one_document, plan)), 0);
  plan.front_policy = FrontPolicy::kStore;
  EXPECT_EQ(MustCompute(*model, one_document, plan).stored_fronts_peak, 8);  // entering slices 1..8
  // Starts at 11 (slice 2), 12 and 20 (starting slices 3 and 5: their incoming front still has to
  // be kept for walking back the slice before) and 30 (slice 7).
  plan.front_policy = FrontPolicy::kReverse;
  EXPECT_EQ(policy_fronts(MustCompute(*model, PackedStream(config.vocab), plan)), 4);
}

TEST(GradientEngineTest, PackedGradientIsTheTokenWeightedSumOfDocumentGradients) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kElu1, LayerNormPlacement::kPre);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 5);
  ASSERT_TRUE(model.ok());
  const PackedBatch packed = PackedStream(config.vocab);
  const Plan plan{.slice = 6, .dtype = DType::kFloat64};
  const GradientResult whole = MustCompute(*model, packed, plan);

  std::vector<at::Tensor> weighted_sum;
  double loss_sum = 0;
  std::vector<int64_t> starts = packed.doc_starts;
  starts.push_back(packed.size());
  for (size_t d = 0; d + 1 < starts.size(); ++d) {
    PackedBatch document;
    document.tokens.assign(packed.tokens.begin() + starts[d], packed.tokens.begin() + starts[d + 1]);
    Plan document_plan = plan;
    document_plan.slice = std::min<int64_t>(plan.slice, document.size());
    const GradientResult part = MustCompute(*model, document, document_plan);
    loss_sum += part.loss_sum;
    for (size_t i = 0; i < part.gradients.size(); ++i) {
      const at::Tensor contribution = part.gradients[i] * static_cast<double>(part.normalizer);
      if (weighted_sum.size() <= i) {
        weighted_sum.push_back(contribution);
      } else {
        weighted_sum[i] = weighted_sum[i] + contribution;
      }
    }
  }
  for (at::Tensor& g : weighted_sum) g = g / static_cast<double>(whole.token_count);
  EXPECT_LE(RelativeDiscrepancy(whole.gradients, weighted_sum), 1e-10);
  EXPECT_NEAR(whole.loss_sum, loss_sum, 1e-10 * loss_sum);
}

TEST(GradientEngineTest, LossNormalizerScalesTheGradient) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kRelu, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 9);
  ASSERT_TRUE(model.ok());
  const PackedBatch batch = PackedStream(config.vocab);
  const Plan plan{.slice = 5, .dtype = DType::kFloat64};
  const GradientResult mean = MustCompute(*model, batch, plan);
  GradientOptions options;
  options.loss_normalizer = 1;
  const GradientResult sum = MustCompute(*model, batch, plan, options);
  std::vector<at::Tensor> scaled;
  for (const at::Tensor& g : mean.gradients) scaled.push_back(g * static_cast<double>(mean.token_count));
  EXPECT_LE(RelativeDiscrepancy(sum.gradients, scaled), 1e-12);
}

TEST(GradientEngineTest, NothingPredictedGivesZeroLossAndGradient) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kRelu, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, at::kCPU, 9);
  ASSERT_TRUE(model.ok());
  PackedBatch batch;
  batch.tokens = {1, 2, 3};
  batch.doc_starts = {0, 1, 2};  // three one-token documents: nothing to predict
  for (int64_t slice : {0, 1, 2}) {
    Plan plan;
    plan.slice = slice;
    plan.dtype = DType::kFloat64;
    const GradientResult result = MustCompute(*model, batch, plan);
    EXPECT_EQ(result.token_count, 0);
    EXPECT_EQ(result.loss_sum, 0.0);
    ASSERT_EQ(result.gradients.size(), model->parameters().size());
    for (const at::Tensor& g : result.gradients) EXPECT_EQ(g.abs().sum().item<double>(), 0.0);
  }
}

TEST(RelativeDiscrepancyTest, IsTheNormOfTheDifferenceOverAllTensorsOverTheNormOfWant) {
  // want = (0, 3 | 4), got − want = (1, 0 | 0): ‖got − want‖ = 1, ‖want‖ = 5.
  const std::vector<at::Tensor> want = {at::tensor({0.0f, 3.0f}), at::tensor({{4.0f}})};
  const std::vector<at::Tensor> got = {at::tensor({1.0f, 3.0f}), at::tensor({{4.0f}})};
  EXPECT_DOUBLE_EQ(RelativeDiscrepancy(got, want), 0.2);
  EXPECT_EQ(RelativeDiscrepancy(want, want), 0.0);
  // In float64: a difference far below float32's resolution of 1 still counts.
  const std::vector<at::Tensor> one = {at::tensor({1.0}, at::kDouble)};
  const std::vector<at::Tensor> nudged = {at::tensor({1.0 + 1e-12}, at::kDouble)};
  EXPECT_NEAR(RelativeDiscrepancy(nudged, one), 1e-12, 1e-15);
  EXPECT_NEAR(RelativeDiscrepancy(nudged, {one[0].to(at::kFloat)}), 1e-12, 1e-15);
}

TEST(RelativeDiscrepancyTest, MismatchedCountsOrShapesThrow) {
  const std::vector<at::Tensor> two = {at::zeros({2}), at::zeros({3})};
  EXPECT_THROW(RelativeDiscrepancy({at::zeros({2})}, two), c10::Error);
  EXPECT_THROW(RelativeDiscrepancy({at::zeros({2}), at::zeros({1})}, two), c10::Error);
}

TEST(GradientEngineTest, ReportsPeakMemoryAndTime) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat32, at::kCPU, 1);
  ASSERT_TRUE(model.ok());
  const GradientResult result = MustCompute(*model, PackedStream(config.vocab), SlicedPlan(8));
  // Parameters and their gradients are alive at the peak.
  EXPECT_GE(result.peak_bytes, 2 * model->parameter_bytes());
  EXPECT_GT(result.seconds, 0.0);
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = SmallEngineConfig(FeatureMap::kSqr, LayerNormPlacement::kPost);
    absl::StatusOr<PerformerModel> model = PerformerModel::Create(config_, DType::kFloat32, at::kCPU, 1);
    ASSERT_TRUE(model.ok());
    model_.emplace(*std::move(model));
  }
  absl::Status Run(const PackedBatch& batch, const Plan& plan, const GradientOptions& options = {}) {
    return ComputeGradient(*model_, batch, plan, options).status();
  }
  ModelConfig config_;
  std::optional<PerformerModel> model_;
};

TEST_F(BadInputTest, EmptySequence) {
  const absl::Status s = Run(PackedBatch{}, Plan{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("empty"));
}

TEST_F(BadInputTest, TokenOutsideVocabulary) {
  PackedBatch batch = PackedStream(config_.vocab);
  batch.tokens[17] = config_.vocab;
  const absl::Status s = Run(batch, SlicedPlan(4));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("token 37 at position 17 is outside the vocabulary [0, 37)"));
  batch.tokens[17] = -1;
  EXPECT_EQ(Run(batch, SlicedPlan(4)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BadInputTest, NegativeSlice) {
  const absl::Status s = Run(PackedStream(config_.vocab), SlicedPlan(-3));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("slice size C must be at least 1"));
}

TEST_F(BadInputTest, SliceLongerThanSequence) {
  const absl::Status s = Run(PackedStream(config_.vocab), SlicedPlan(41));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("C = 41 exceeds the sequence length L = 40"));
}

TEST_F(BadInputTest, BadDocumentStarts) {
  PackedBatch batch = PackedStream(config_.vocab);
  batch.doc_starts = {0, 20, 20};
  EXPECT_EQ(Run(batch, Plan{}).code(), absl::StatusCode::kInvalidArgument);
  batch.doc_starts = {3, 20};
  EXPECT_EQ(Run(batch, Plan{}).code(), absl::StatusCode::kInvalidArgument);
  batch.doc_starts = {0, 40};
  EXPECT_EQ(Run(batch, Plan{}).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BadInputTest, DTypeMismatchAndBadBlock) {
  EXPECT_EQ(Run(PackedStream(config_.vocab), SlicedPlan(0, DType::kFloat64)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run(PackedStream(config_.vocab),
                [] {
                  Plan plan;
                  plan.block = 0;
                  return plan;
                }())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelCreationTest, DModelNotDivisibleByHeads) {
  ModelConfig config = SmallEngineConfig(FeatureMap::kSqr, LayerNormPlacement::kPost);
  config.heads = 3;
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat32, at::kCPU, 1);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr("d_model (16) must be divisible by heads (3)"));
}

}  // namespace
}  // namespace slimfit::performer
