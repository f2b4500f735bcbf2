#include "performer/performer_model.h"

#include <cmath>
#include <map>
#include <string>

#include <ATen/ATen.h>

#include "gtest/gtest.h"

namespace slimfit::performer {
namespace {

ModelConfig Small() {
  ModelConfig config;
  config.vocab = 40;
  config.d_model = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 32;
  return config;
}

TEST(PerformerModelTest, CreateIsDeterministicAndFollowsPyTorchDefaults) {
  absl::StatusOr<PerformerModel> a = PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 5);
  absl::StatusOr<PerformerModel> b = PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 5);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->names(), ParameterNames(Small()));
  for (size_t i = 0; i < a->names().size(); ++i) {
    const std::string& name = a->names()[i];
    const at::Tensor& p = a->parameters()[i];
    EXPECT_TRUE(at::equal(p, b->parameters()[i])) << name;
    EXPECT_EQ(p.sizes().vec(), ParameterShapes(Small())[i]) << name;
    if (name.find("layernorm") != std::string::npos) {
      EXPECT_EQ(p.sum().item<double>(), name.find(".weight") != std::string::npos ? p.numel() : 0.0) << name;
      continue;
    }
    if (name == "input_map.weight") continue;  // N(0, 1)
    // Linear maps: weight [out, in] and bias [out], both uniform in ±1/sqrt(in).
    const bool is_weight = name.size() > 7 && name.substr(name.size() - 7) == ".weight";
    const at::Tensor& weight = is_weight ? p : a->parameters()[i - 1];
    const double bound = 1.0 / std::sqrt(static_cast<double>(weight.size(1)));
    EXPECT_LE(p.abs().max().item<double>(), bound + 1e-7) << name;
    EXPECT_GE(p.abs().max().item<double>(), 0.5 * bound) << name;
  }
}

TEST(PerformerModelTest, ReadoutScaleScalesOnlyTheOutputMap) {
  absl::StatusOr<PerformerModel> plain = PerformerModel::Create(Small(), DType::kFloat64, at::kCPU, 9);
  InitOptions init;
  init.readout_scale = kTrainingReadoutScale;
  absl::StatusOr<PerformerModel> scaled = PerformerModel::Create(Small(), DType::kFloat64, at::kCPU, 9, init);
  ASSERT_TRUE(plain.ok() && scaled.ok());
  int scaled_tensors = 0;
  for (size_t i = 0; i < plain->names().size(); ++i) {
    const std::string& name = plain->names()[i];
    if (name.rfind("output_logit_map.", 0) == 0) {
      EXPECT_TRUE(at::allclose(scaled->parameters()[i], plain->parameters()[i] * 0.1)) << name;
      ++scaled_tensors;
    } else {
      EXPECT_TRUE(at::equal(scaled->parameters()[i], plain->parameters()[i])) << name;
    }
  }
  EXPECT_EQ(scaled_tensors, 2);
  for (double bad : {0.0, -1.0, std::nan("")}) {
    init.readout_scale = bad;
    EXPECT_EQ(PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 9, init).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace slimfit::performer
