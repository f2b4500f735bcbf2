// What the engine's tests share: every model configuration an exactness test sweeps (feature map,
// LayerNorm placement, prefix mode, dtype) with readable test names, and a ComputeGradient that
// fails the test on an error. Used by gradient_engine_test (sliced = full on the CPU) and
// gradient_engine_cuda_test (CUDA = CPU).
#ifndef SLIMFIT_PERFORMER_GRADIENT_ENGINE_TEST_CASES_H_
#define SLIMFIT_PERFORMER_GRADIENT_ENGINE_TEST_CASES_H_

#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine.h"

namespace slimfit::performer {

using EngineCase = std::tuple<FeatureMap, LayerNormPlacement, PrefixMode, DType>;

// Every combination, for INSTANTIATE_TEST_SUITE_P.
inline auto EveryEngineCase() {
  return ::testing::Combine(
      ::testing::Values(FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr, FeatureMap::kFavor),
      ::testing::Values(LayerNormPlacement::kPost, LayerNormPlacement::kPre),
      ::testing::Values(PrefixMode::kCumsum, PrefixMode::kChunked),
      ::testing::Values(DType::kFloat64, DType::kFloat32));
}

// "favorp_pre_chunked_float32": the case's names joined, '+' spelled 'p'.
inline std::string EngineCaseName(const ::testing::TestParamInfo<EngineCase>& info) {
  std::string name = absl::StrCat(std::string(FeatureMapName(std::get<0>(info.param))), "_",
                                  LayerNormPlacementName(std::get<1>(info.param)), "_",
                                  PrefixModeName(std::get<2>(info.param)), "_", DTypeName(std::get<3>(info.param)));
  for (char& c : name) {
    if (c == '+') c = 'p';
  }
  return name;
}

// ComputeGradient, failing the test (and returning an empty result) on an error.
inline GradientResult MustCompute(const PerformerModel& model, const PackedBatch& batch, const Plan& plan,
                                  const GradientOptions& options = {}) {
  absl::StatusOr<GradientResult> result = ComputeGradient(model, batch, plan, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : GradientResult{};
}

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_GRADIENT_ENGINE_TEST_CASES_H_
