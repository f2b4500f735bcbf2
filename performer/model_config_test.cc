#include "performer/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace slimfit::performer {
namespace {

using ::testing::HasSubstr;

TEST(ModelConfigTest, DefaultIsValidAndCountsParameters) {
  ModelConfig config;
  EXPECT_TRUE(config.Validate().ok());
  // 256·128 embedding + 2 layers · (3·(256²+256) + 256·1024+1024 + 1024·256+256 + 4·256) + 256·256+256
  EXPECT_EQ(config.parameter_count(), 32768 + 2 * (197376 + 263168 + 262400 + 1024) + 65792);
  EXPECT_EQ(config.front_elements_per_layer(), 4 * 64 * 65);
}

TEST(ModelConfigTest, RejectsImpossibleShapesNamingTheField) {
  ModelConfig config;
  config.heads = 3;
  EXPECT_EQ(config.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.Validate().message()), HasSubstr("divisible by heads"));
  config = ModelConfig();
  config.d_model = 6;
  config.heads = 1;
  EXPECT_THAT(std::string(config.Validate().message()), HasSubstr("divisible by 4"));
  config = ModelConfig();
  config.layers = 0;
  EXPECT_THAT(std::string(config.Validate().message()), HasSubstr("layers must be positive"));
  config = ModelConfig();
  config.feature_multiplier = 2;
  EXPECT_THAT(std::string(config.Validate().message()), HasSubstr("needs the favor+ feature map"));
  config.feature_map = FeatureMap::kFavor;
  EXPECT_TRUE(config.Validate().ok());
}

TEST(ModelConfigTest, NamesRoundTrip) {
  for (FeatureMap map : {FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr, FeatureMap::kFavor}) {
    absl::StatusOr<FeatureMap> parsed = ParseFeatureMap(FeatureMapName(map));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, map);
  }
  EXPECT_EQ(ParseFeatureMap("softmax").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseLayerNormPlacement("pre"), LayerNormPlacement::kPre);
  EXPECT_EQ(ParseLayerNormPlacement("middle").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::performer
