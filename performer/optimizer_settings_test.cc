#include "performer/optimizer_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace slimfit::performer {
namespace {

using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(OptimizerSettingsTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateOptimizerSettings(OptimizerSettings::AdamW(3e-4)).ok());
  EXPECT_TRUE(ValidateOptimizerSettings(OptimizerSettings::Sgd(0.1, 0.9)).ok());
}

TEST(OptimizerSettingsTest, EachRangeIsCheckedAndNamed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    const char* name;
    void (*change)(OptimizerSettings&);
  };
  const Case cases[] = {
      {"learning_rate", [](OptimizerSettings& s) { s.learning_rate = 0; }},
      {"learning_rate",
       [](OptimizerSettings& s) { s.learning_rate = std::numeric_limits<double>::infinity(); }},
      {"warmup_steps", [](OptimizerSettings& s) { s.warmup_steps = -1; }},
      {"weight_decay", [](OptimizerSettings& s) { s.weight_decay = -0.5; }},
      {"gradient_clip_norm", [](OptimizerSettings& s) { s.gradient_clip_norm = 0.0; }},
      {"adamw.beta1", [](OptimizerSettings& s) { s.beta1 = 1.0; }},
      {"adamw.beta2", [](OptimizerSettings& s) { s.beta2 = -0.1; }},
      {"adamw.epsilon", [](OptimizerSettings& s) { s.epsilon = 0; }},
  };
  for (const Case& c : cases) {
    OptimizerSettings settings = OptimizerSettings::AdamW(0.01);
    c.change(settings);
    const absl::Status status = ValidateOptimizerSettings(settings, "spec.optimizer");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(Message(status), StartsWith(std::string("spec.optimizer.") + c.name + ": ")) << c.name;
  }
  OptimizerSettings weight_decay = OptimizerSettings::AdamW(0.01);
  weight_decay.weight_decay = nan;
  EXPECT_THAT(Message(ValidateOptimizerSettings(weight_decay)), StartsWith("optimizer.weight_decay: "));
  // SGD's own fields; AdamW's are not looked at for SGD.
  OptimizerSettings sgd = OptimizerSettings::Sgd(0.1, 1.0);
  sgd.beta1 = 7;
  EXPECT_THAT(Message(ValidateOptimizerSettings(sgd, "x")), StartsWith("x.sgd.momentum: "));
  sgd.momentum = 0;
  sgd.nesterov = true;
  EXPECT_THAT(Message(ValidateOptimizerSettings(sgd, "x")), StartsWith("x.sgd.nesterov: "));
  sgd.momentum = 0.5;
  EXPECT_TRUE(ValidateOptimizerSettings(sgd, "x").ok());
}

TEST(OptimizerSettingsTest, LocalStepsExtraBytesCountsTheMoments) {
  const OptimizerSettings adamw = OptimizerSettings::AdamW(0.01);
  EXPECT_EQ(LocalStepsExtraBytes(adamw, 1000), 4000);
  OptimizerSettings momentum = OptimizerSettings::Sgd(0.1, 0.9);
  EXPECT_EQ(LocalStepsExtraBytes(momentum, 1000), 3000);
  momentum.nesterov = true;
  EXPECT_EQ(LocalStepsExtraBytes(momentum, 1000), 3000);
  EXPECT_EQ(LocalStepsExtraBytes(OptimizerSettings::Sgd(0.1), 1000), 2000);
  EXPECT_EQ(LocalStepsExtraBytes(adamw, int64_t{3} << 30), int64_t{12} << 30);
}

TEST(OptimizerSettingsTest, LocalStepsExtraBytesCountLossyPseudoGradients) {
  const OptimizerSettings adamw = OptimizerSettings::AdamW(0.01);
  const OptimizerSettings plain = OptimizerSettings::Sgd(0.1);
  EXPECT_EQ(LocalStepsExtraBytes(adamw, 1000, TensorEncoding::kExact), 4000);
  // Lossy: the error feedback (parameter_bytes) and the encoded pseudo-gradient (half of it).
  for (const TensorEncoding encoding :
       {TensorEncoding::kInt8, TensorEncoding::kFloat16, TensorEncoding::kBfloat16}) {
    EXPECT_EQ(LocalStepsExtraBytes(adamw, 1000, encoding), 4000 + 1500);
    EXPECT_EQ(LocalStepsExtraBytes(plain, 1000, encoding), 2000 + 1500);
    EXPECT_EQ(LocalStepsExtraBytes(adamw, int64_t{3} << 30, encoding) -
                  LocalStepsExtraBytes(adamw, int64_t{3} << 30),
              (int64_t{9} << 30) / 2);
  }
}

}  // namespace
}  // namespace slimfit::performer
