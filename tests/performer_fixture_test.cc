// Cross-implementation check: the C++ engine reproduces fixtures made by an independent PyTorch
// implementation (tests/testdata/make_performer_fixture.py, quadratic masked attention in float64)
// — loss and every gradient, for the full gradient and the sliced engine with both prefix modes.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "performer/gradient_engine.h"
#include "performer/model_checkpoint.h"
#include "performer/safetensors.h"

namespace slimfit::performer {
namespace {

std::string TestDataPath(absl::string_view name) {
  return testing_util::RunfilePath(absl::StrCat("tests/testdata/", name));
}

std::vector<int64_t> ToVector(const at::Tensor& t) {
  const at::Tensor c = t.contiguous().to(at::kLong);
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, EngineReproducesTheIndependentImplementation) {
  const std::string path = TestDataPath(absl::StrCat("performer_fixture_", GetParam(), ".safetensors"));
  absl::StatusOr<TensorFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<PerformerModel> model = LoadModel(path, DType::kFloat64, at::kCPU);
  ASSERT_TRUE(model.ok()) << model.status();

  PackedBatch batch;
  batch.tokens = ToVector(file->tensors.at("fixture.tokens"));
  batch.doc_starts = ToVector(file->tensors.at("fixture.doc_starts"));
  const double want_loss = file->tensors.at("fixture.loss").item<double>();
  const double want_loss_sum = file->tensors.at("fixture.loss_sum").item<double>();
  GradientOptions options;
  for (int64_t r = 0; r < model->config().layers; ++r) {
    auto it = file->tensors.find(absl::StrCat("favor.layers.", r));
    if (it != file->tensors.end()) options.favor_projections.push_back(it->second);
  }

  for (int64_t slice : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{20}}) {
    for (PrefixMode mode : {PrefixMode::kCumsum, PrefixMode::kChunked}) {
      Plan plan;
      plan.dtype = DType::kFloat64;
      plan.slice = slice;
      plan.prefix_mode = mode;
      plan.block = 3;
      absl::StatusOr<GradientResult> result = ComputeGradient(*model, batch, plan, options);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(result->token_count, file->tensors.at("fixture.token_count").item<int64_t>());
      EXPECT_NEAR(result->loss(), want_loss, 1e-5 * want_loss) << plan.DebugString();
      EXPECT_NEAR(result->loss_sum, want_loss_sum, 1e-5 * want_loss_sum);
      for (size_t i = 0; i < model->names().size(); ++i) {
        const at::Tensor& want = file->tensors.at("grad." + model->names()[i]);
        const double error = (result->gradients[i] - want).norm().item<double>();
        const double scale = want.norm().item<double>();
        EXPECT_LE(error, 1e-5 * scale + 1e-12) << model->names()[i] << " with " << plan.DebugString();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, FixtureTest,
                         ::testing::Values("sqr_post", "relu_pre", "elu_post", "favor_pre"));

TEST(StateDictImportTest, TorchSavedParametersGiveTheSameModel) {
  const std::string native = TestDataPath("performer_fixture_sqr_post.safetensors");
  absl::StatusOr<PerformerModel> from_safetensors = LoadModel(native, DType::kFloat64, at::kCPU);
  ASSERT_TRUE(from_safetensors.ok()) << from_safetensors.status();
  const std::string pt = TestDataPath("performer_fixture_sqr_post_state_dict.pt");
  absl::StatusOr<PerformerModel> from_pt =
      LoadModel(pt, DType::kFloat64, at::kCPU, from_safetensors->config());
  ASSERT_TRUE(from_pt.ok()) << from_pt.status();
  for (size_t i = 0; i < from_pt->parameters().size(); ++i) {
    EXPECT_TRUE(at::equal(from_pt->parameters()[i], from_safetensors->parameters()[i]))
        << from_pt->names()[i];
  }
  // Without a config a state_dict cannot be read: it does not describe its model.
  absl::StatusOr<PerformerModel> no_config = LoadModel(pt, DType::kFloat64, at::kCPU);
  EXPECT_EQ(no_config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_config.status().message()), ::testing::HasSubstr("pass the model's shape"));
}

}  // namespace
}  // namespace slimfit::performer
