#include "performer/model_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "base/test_util.h"
#include "performer/safetensors.h"

namespace slimfit::performer {
namespace {

using ::slimfit::testing_util::TempPath;
using ::testing::HasSubstr;

ModelConfig Small() {
  ModelConfig config;
  config.vocab = 20;
  config.d_model = 8;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 12;
  config.feature_map = FeatureMap::kElu1;
  config.layernorm = LayerNormPlacement::kPre;
  return config;
}

TEST(ModelCheckpointTest, SaveAndLoadRoundTripWithConfig) {
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 4);
  ASSERT_TRUE(model.ok());
  const std::string path = TempPath("model.safetensors");
  ASSERT_TRUE(SaveModel(path, *model, {{"job", "7"}}).ok());
  absl::StatusOr<PerformerModel> loaded = LoadModel(path, DType::kFloat64, at::kCPU);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config().DebugString(), Small().DebugString());
  EXPECT_EQ(loaded->dtype(), DType::kFloat64);
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    EXPECT_TRUE(at::equal(loaded->parameters()[i].to(at::kFloat), model->parameters()[i]))
        << model->names()[i];
  }
}

TEST(ModelCheckpointTest, ReservedMetadataKeysAreRejected) {
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 4);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(SaveModel(TempPath("x.safetensors"), *model, {{"d_model", "9"}}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelCheckpointTest, ACheckpointOfAnotherShapeNamesTheTensor) {
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 4);
  ASSERT_TRUE(model.ok());
  const std::string path = TempPath("small.safetensors");
  ASSERT_TRUE(SaveModel(path, *model).ok());
  ModelConfig wider = Small();
  wider.d_ff = 16;
  absl::StatusOr<PerformerModel> loaded = LoadModel(path, DType::kFloat32, at::kCPU, wider);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("d_ff=12"));

  // The same tensors under a config read from the caller: the first mismatching tensor is named.
  absl::StatusOr<TensorFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok());
  file->metadata.clear();
  const std::string bare = TempPath("bare.safetensors");
  ASSERT_TRUE(WriteSafetensors(bare, *file).ok());
  loaded = LoadModel(bare, DType::kFloat32, at::kCPU, wider);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("'layers.0.U_map.weight' has shape [12, 8] but a model with"));
  loaded = LoadModel(bare, DType::kFloat32, at::kCPU);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("does not describe its model"));

  file->tensors.erase("output_logit_map.bias");
  ASSERT_TRUE(WriteSafetensors(bare, *file).ok());
  loaded = LoadModel(bare, DType::kFloat32, at::kCPU, Small());
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("no tensor 'output_logit_map.bias'"));
}

TEST(ModelCheckpointTest, CorruptAndMissingFilesAreClearErrors) {
  EXPECT_EQ(LoadModel(TempPath("absent.safetensors"), DType::kFloat32, at::kCPU).status().code(),
            absl::StatusCode::kNotFound);
  const std::string path = TempPath("corrupt.safetensors");
  std::ofstream(path) << "not a checkpoint at all";
  EXPECT_EQ(LoadModel(path, DType::kFloat32, at::kCPU).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelCheckpointTest, ConfigMetadataErrorsNameTheKey) {
  std::map<std::string, std::string> metadata = ConfigToMetadata(Small());
  metadata["heads"] = "two";
  EXPECT_THAT(std::string(ConfigFromMetadata(metadata).status().message()),
              HasSubstr("'heads' is not an integer"));
  metadata = ConfigToMetadata(Small());
  metadata.erase("layernorm");
  EXPECT_THAT(std::string(ConfigFromMetadata(metadata).status().message()), HasSubstr("'layernorm'"));
}

}  // namespace
}  // namespace slimfit::performer
