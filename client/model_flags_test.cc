#include "client/model_flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::client {
namespace {

using ::testing::HasSubstr;

struct Parsed {
  absl::Status status;
  v1::ModelConfig config;
  bool any_set = false;
};

Parsed Parse(std::vector<std::string> args, v1::ModelConfig config = v1::ModelConfig()) {
  base::FlagSet flags("submit", "slimfit submit", "");
  ModelShapeFlags model(flags, "feature_map");
  Parsed parsed;
  parsed.status = flags.Parse(args);
  if (!parsed.status.ok()) return parsed;
  parsed.any_set = model.AnySet();
  parsed.status = model.Apply(&config);
  parsed.config = config;
  return parsed;
}

TEST(ModelShapeFlagsTest, WritesOnlyTheFlagsGiven) {
  v1::ModelConfig from_spec;
  from_spec.set_layers(6);
  from_spec.set_d_ff(512);
  const Parsed parsed = Parse({"--d_model=128", "--heads=8", "--feature_map=favor+", "--feature_multiplier=2",
                               "--ln=pre", "--d_ff=256"},
                              from_spec);
  ASSERT_TRUE(parsed.status.ok()) << parsed.status;
  EXPECT_TRUE(parsed.any_set);
  EXPECT_EQ(parsed.config.d_model(), 128);
  EXPECT_EQ(parsed.config.heads(), 8);
  EXPECT_EQ(parsed.config.layers(), 6);  // kept from the spec
  EXPECT_EQ(parsed.config.d_ff(), 256);  // the flag wins
  EXPECT_EQ(parsed.config.feature_map(), v1::FEATURE_MAP_FAVOR);
  EXPECT_EQ(parsed.config.feature_multiplier(), 2);
  EXPECT_EQ(parsed.config.layernorm(), v1::LAYER_NORM_PLACEMENT_PRE);
  EXPECT_FALSE(parsed.config.has_vocab());
}

TEST(ModelShapeFlagsTest, NothingGivenWritesNothing) {
  const Parsed parsed = Parse({});
  ASSERT_TRUE(parsed.status.ok());
  EXPECT_FALSE(parsed.any_set);
  EXPECT_EQ(parsed.config.ByteSizeLong(), 0u);
}

TEST(ModelShapeFlagsTest, RejectsBadValuesNamingTheFlag) {
  Parsed parsed = Parse({"--layers=0"});
  EXPECT_EQ(parsed.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status.message()), HasSubstr("--layers=0: expected a positive integer"));
  parsed = Parse({"--feature_map=softmax"});
  EXPECT_EQ(parsed.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status.message()), HasSubstr("--feature_map=softmax: unknown feature map"));
  parsed = Parse({"--ln=middle"});
  EXPECT_THAT(std::string(parsed.status.message()), HasSubstr("--ln=middle: expected post or pre"));
}

TEST(ModelShapeFlagsTest, FeatureMapNames) {
  EXPECT_EQ(*ParseFeatureMapFlag("f", "relu"), v1::FEATURE_MAP_RELU);
  EXPECT_EQ(*ParseFeatureMapFlag("f", "elu+1"), v1::FEATURE_MAP_ELU1);
  EXPECT_EQ(*ParseFeatureMapFlag("f", "SQR"), v1::FEATURE_MAP_SQR);
  EXPECT_EQ(*ParseFeatureMapFlag("f", "favor+"), v1::FEATURE_MAP_FAVOR);
}

}  // namespace
}  // namespace slimfit::client
