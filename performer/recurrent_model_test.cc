#include "performer/recurrent_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine.h"
#include "performer/gradient_engine_test_cases.h"

namespace slimfit::performer {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kFeatureSeed = 11;

// 90 tokens in five documents, one of a single token; boundaries fall inside most stretches.
PackedBatch PackedStream(int64_t vocab) {
  PackedBatch batch;
  for (int64_t i = 0; i < 90; ++i) batch.tokens.push_back((i * 7 + 3 * (i / 5)) % vocab);
  batch.doc_starts = {0, 23, 24, 50, 71};
  return batch;
}

// The engine's loss of the whole batch: full back-propagation, the reference every plan equals.
double EngineLossSum(const PerformerModel& model, const PackedBatch& batch) {
  Plan plan;
  plan.dtype = DType::kFloat64;
  GradientOptions options;
  options.feature_seed = kFeatureSeed;
  absl::StatusOr<GradientResult> result = ComputeGradient(model, batch, plan, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->loss_sum : NAN;
}

class RecurrentModelTest : public ::testing::TestWithParam<std::tuple<FeatureMap, LayerNormPlacement>> {
 protected:
  ModelConfig Config() const { return SmallEngineConfig(std::get<0>(GetParam()), std::get<1>(GetParam())); }
};

TEST_P(RecurrentModelTest, ScoreEqualsTheGradientEnginesLossForEveryStretch) {
  const PerformerModel model = MustCreateModel(Config(), DType::kFloat64, /*seed=*/5);
  const PackedBatch batch = PackedStream(model.config().vocab);
  const double want = EngineLossSum(model, batch);
  for (int64_t stretch : {1, 7, 23, 64, 90, 1000}) {
    ForwardOptions options;
    options.stretch = stretch;
    options.feature_seed = kFeatureSeed;
    absl::StatusOr<ScoreResult> score = ScoreTokens(model, batch, options);
    ASSERT_TRUE(score.ok()) << score.status();
    EXPECT_NEAR(score->loss_sum, want, 1e-10 * std::abs(want)) << "stretch " << stretch;
    EXPECT_EQ(score->predicted_tokens, PredictedTokenCount(batch));
    EXPECT_NEAR(score->bits_per_token(), want / PredictedTokenCount(batch) / std::log(2.0), 1e-10);
  }
}

TEST_P(RecurrentModelTest, TokenByTokenLogProbabilitiesGiveTheSameLossAsScoring) {
  const PerformerModel model = MustCreateModel(Config(), DType::kFloat64, /*seed=*/5);
  const PackedBatch stream = PackedStream(model.config().vocab);
  const std::vector<int64_t> document(stream.tokens.begin(), stream.tokens.begin() + 23);
  ForwardOptions options;
  options.feature_seed = kFeatureSeed;
  absl::StatusOr<RecurrentModel> decoder = RecurrentModel::Create(model, options);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  double loss = 0;
  for (size_t i = 0; i + 1 < document.size(); ++i) {
    absl::StatusOr<at::Tensor> log_probs = decoder->Feed({document[i]});
    ASSERT_TRUE(log_probs.ok()) << log_probs.status();
    ASSERT_EQ(log_probs->sizes(), at::IntArrayRef({model.config().vocab}));
    EXPECT_NEAR(log_probs->exp().sum().item<double>(), 1.0, 1e-12);
    loss -= (*log_probs)[document[i + 1]].item<double>();
  }
  EXPECT_EQ(decoder->position(), static_cast<int64_t>(document.size()) - 1);
  absl::StatusOr<ScoreResult> score = ScoreTokens(model, PackedBatch{document, {0}}, options);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_NEAR(loss, score->loss_sum, 1e-10 * score->loss_sum);
}

TEST_P(RecurrentModelTest, APromptAtOnceEqualsThePromptTokenByToken) {
  const PerformerModel model = MustCreateModel(Config(), DType::kFloat64, /*seed=*/5);
  const PackedBatch stream = PackedStream(model.config().vocab);
  const std::vector<int64_t> prompt(stream.tokens.begin(), stream.tokens.begin() + 20);
  ForwardOptions options;
  options.feature_seed = kFeatureSeed;
  options.stretch = 6;  // the prompt runs as four stretches
  absl::StatusOr<RecurrentModel> at_once = RecurrentModel::Create(model, options);
  absl::StatusOr<RecurrentModel> one_by_one = RecurrentModel::Create(model, options);
  ASSERT_TRUE(at_once.ok() && one_by_one.ok());
  absl::StatusOr<at::Tensor> want = at_once->Feed(prompt);
  absl::StatusOr<at::Tensor> got;
  for (int64_t token : prompt) got = one_by_one->Feed({token});
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_TRUE(at::allclose(*got, *want, 1e-10, 1e-12));
  // And both continue alike.
  want = at_once->Feed({3, 4});
  got = one_by_one->Feed({3, 4});
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_TRUE(at::allclose(*got, *want, 1e-10, 1e-12));
}

INSTANTIATE_TEST_SUITE_P(
    FeatureMapsAndLayerNorms, RecurrentModelTest,
    ::testing::Combine(::testing::Values(FeatureMap::kSqr, FeatureMap::kRelu, FeatureMap::kFavor),
                       ::testing::Values(LayerNormPlacement::kPost, LayerNormPlacement::kPre)),
    [](const auto& info) {
      const FeatureMap map = std::get<0>(info.param);
      const char* name = map == FeatureMap::kSqr ? "sqr" : map == FeatureMap::kRelu ? "relu" : "favor";
      return absl::StrCat(name, "_", LayerNormPlacementName(std::get<1>(info.param)));
    });

TEST(RecurrentModel, StateIsTheFrontsWhateverTheLength) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr, LayerNormPlacement::kPost);
  const PerformerModel model = MustCreateModel(config, DType::kFloat64, /*seed=*/5);
  absl::StatusOr<RecurrentModel> decoder = RecurrentModel::Create(model);
  ASSERT_TRUE(decoder.ok());
  const int64_t front_bytes = config.layers * config.front_elements_per_layer() * 8;  // float64
  EXPECT_EQ(decoder->state_bytes(), front_bytes);
  ASSERT_TRUE(decoder->Feed({1}).ok());
  ASSERT_TRUE(decoder->Feed(std::vector<int64_t>(2000, 5)).ok());
  EXPECT_EQ(decoder->position(), 2001);
  EXPECT_EQ(decoder->state_bytes(), front_bytes);
}

TEST(RecurrentModel, ResetStartsANewDocument) {
  const PerformerModel model =
      MustCreateModel(SmallEngineConfig(FeatureMap::kSqr), DType::kFloat64, /*seed=*/5);
  absl::StatusOr<RecurrentModel> fresh = RecurrentModel::Create(model);
  absl::StatusOr<RecurrentModel> reused = RecurrentModel::Create(model);
  ASSERT_TRUE(fresh.ok() && reused.ok());
  ASSERT_TRUE(reused->Feed({9, 8, 7, 6}).ok());
  reused->Reset();
  EXPECT_EQ(reused->position(), 0);
  absl::StatusOr<at::Tensor> want = fresh->Feed({1, 2, 3});
  absl::StatusOr<at::Tensor> got = reused->Feed({1, 2, 3});
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_TRUE(at::equal(*got, *want));
}

TEST(RecurrentModel, BadTokensAreRefusedAndLeaveTheStateAsItWas) {
  const PerformerModel model =
      MustCreateModel(SmallEngineConfig(FeatureMap::kSqr), DType::kFloat64, /*seed=*/5);
  absl::StatusOr<RecurrentModel> decoder = RecurrentModel::Create(model);
  ASSERT_TRUE(decoder.ok());
  ASSERT_TRUE(decoder->Feed({1, 2}).ok());
  absl::StatusOr<at::Tensor> bad = decoder->Feed({3, 37});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("token 1 = 37 is outside the vocabulary [0, 37)"));
  EXPECT_EQ(decoder->Feed({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder->position(), 2);
  EXPECT_EQ(RecurrentModel::Create(model, ForwardOptions{0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ScoreResult> score = ScoreTokens(model, PackedBatch{{1, 40}, {0}}, {});
  EXPECT_EQ(score.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::performer
