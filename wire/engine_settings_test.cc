#include "wire/engine_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace slimfit::wire {
namespace {

using performer::OptimizerSettings;
using performer::TensorEncoding;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(EngineSettingsTest, AdamWFieldsAndDefaults) {
  v1::Optimizer spec;
  spec.mutable_adamw()->set_beta2(0.99);
  spec.set_learning_rate(0.01);
  spec.set_weight_decay(0.1);
  spec.set_warmup_steps(2);
  spec.set_gradient_clip_norm(0.5);
  absl::StatusOr<OptimizerSettings> settings = OptimizerSettingsFromProto(spec);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_TRUE(settings->is_adamw());
  EXPECT_EQ(settings->learning_rate, 0.01);
  EXPECT_EQ(settings->weight_decay, 0.1);
  EXPECT_EQ(settings->warmup_steps, 2);
  ASSERT_TRUE(settings->gradient_clip_norm.has_value());
  EXPECT_EQ(*settings->gradient_clip_norm, 0.5);
  EXPECT_EQ(settings->beta1, 0.9);  // jobs.proto's defaults where unset
  EXPECT_EQ(settings->beta2, 0.99);
  EXPECT_EQ(settings->epsilon, 1e-8);
  spec.clear_gradient_clip_norm();
  EXPECT_FALSE(OptimizerSettingsFromProto(spec)->gradient_clip_norm.has_value());
}

TEST(EngineSettingsTest, SgdFields) {
  v1::Optimizer spec;
  spec.mutable_sgd()->set_momentum(0.9);
  spec.mutable_sgd()->set_nesterov(true);
  spec.set_learning_rate(0.5);
  absl::StatusOr<OptimizerSettings> settings = OptimizerSettingsFromProto(spec);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->kind, OptimizerSettings::Kind::kSgd);
  EXPECT_EQ(settings->momentum, 0.9);
  EXPECT_TRUE(settings->nesterov);
  EXPECT_EQ(settings->moments(), 1);
}

TEST(EngineSettingsTest, ValidationNamesTheField) {
  v1::Optimizer spec;
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("spec.optimizer.kind"));
  spec.mutable_adamw()->set_beta1(1.0);
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("spec.optimizer.learning_rate: required"));
  spec.set_learning_rate(0.1);
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("spec.optimizer.adamw.beta1"));
  spec.mutable_sgd()->set_nesterov(true);
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("spec.optimizer.sgd.nesterov"));
  spec.mutable_sgd()->set_nesterov(false);
  spec.set_learning_rate(0);
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("spec.optimizer.learning_rate"));
  spec.clear_learning_rate();
  EXPECT_THAT(ValidateOptimizer(spec).message(), HasSubstr("required for SGD"));
}

TEST(EngineSettingsTest, ValidationUsesTheGivenFieldPrefix) {
  v1::Optimizer spec;
  absl::Status no_kind = ValidateOptimizer(spec, "local_steps.inner_optimizer");
  EXPECT_EQ(no_kind.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_kind.message()), StartsWith("local_steps.inner_optimizer.kind: "));
  spec.mutable_sgd()->set_momentum(1.5);
  spec.set_learning_rate(0.7);
  EXPECT_THAT(std::string(ValidateOptimizer(spec, "spec.outer_optimizer").message()),
              StartsWith("spec.outer_optimizer.sgd.momentum: "));
}

TEST(EngineSettingsTest, Encodings) {
  EXPECT_EQ(TensorEncodingFromProto(v1::COMPRESSION_UNSPECIFIED), TensorEncoding::kExact);
  EXPECT_EQ(TensorEncodingFromProto(v1::COMPRESSION_NONE), TensorEncoding::kExact);
  EXPECT_EQ(TensorEncodingFromProto(v1::COMPRESSION_FLOAT16), TensorEncoding::kFloat16);
  EXPECT_EQ(TensorEncodingFromProto(v1::COMPRESSION_BFLOAT16), TensorEncoding::kBfloat16);
  EXPECT_EQ(TensorEncodingFromProto(v1::COMPRESSION_INT8), TensorEncoding::kInt8);
}

}  // namespace
}  // namespace slimfit::wire
