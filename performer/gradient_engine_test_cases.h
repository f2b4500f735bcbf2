// What the engine's tests share: every model configuration an exactness test sweeps (feature map,
// LayerNorm placement, prefix mode, dtype) with readable test names, a small model and a packed
// stream, a ComputeGradient that fails the test on an error, and a hand-written dp schedule. Used by
// gradient_engine_test (sliced = full on the CPU), slice_replay_test (replayed = op by op),
// explicit_backprop_test (by hand = autograd) and gradient_engine_cuda_test (CUDA = CPU).
#ifndef SLIMFIT_PERFORMER_GRADIENT_ENGINE_TEST_CASES_H_
#define SLIMFIT_PERFORMER_GRADIENT_ENGINE_TEST_CASES_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine.h"
#include "performer/model_config.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"

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
  std::string name =
      absl::StrCat(std::string(FeatureMapName(std::get<0>(info.param))), "_",
                   LayerNormPlacementName(std::get<1>(info.param)), "_",
                   PrefixModeName(std::get<2>(info.param)), "_", DTypeName(std::get<3>(info.param)));
  for (char& c : name) {
    if (c == '+') c = 'p';
  }
  return name;
}

// The engine tests' small model: d_model 16, two layers of two heads, d_ff 24, vocab 37.
inline ModelConfig SmallEngineConfig(FeatureMap map, LayerNormPlacement ln = LayerNormPlacement::kPost) {
  ModelConfig config;
  config.vocab = 37;
  config.d_model = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 24;
  config.feature_map = map;
  config.feature_multiplier = map == FeatureMap::kFavor ? 2 : 1;
  config.layernorm = ln;
  return config;
}

// PerformerModel::Create (on the CPU unless told), failing the test on an error.
inline PerformerModel MustCreateModel(const ModelConfig& config, DType dtype, uint64_t seed,
                                      at::Device device = at::kCPU) {
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, dtype, device, seed);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

// 120 tokens in five documents, one of a single token: long runs of slices without a document
// start, slices with one or several, and (at C = 1) rows that predict nothing.
inline PackedBatch FiveDocumentStream(int64_t vocab) {
  PackedBatch batch;
  for (int64_t i = 0; i < 120; ++i) batch.tokens.push_back((i * 11 + 5 * (i / 7)) % vocab);
  batch.doc_starts = {0, 45, 46, 70, 101};
  return batch;
}

// ComputeGradient, failing the test (and returning an empty result) on an error.
inline GradientResult MustCompute(const PerformerModel& model, const PackedBatch& batch, const Plan& plan,
                                  const GradientOptions& options = {}) {
  absl::StatusOr<GradientResult> result = ComputeGradient(model, batch, plan, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : GradientResult{};
}

// The replay-count case of slice_replay_test and gradient_engine_cuda_test: one document of 64
// tokens in 8 slices of 8, float64, the store policy (so the forward sweep runs slice by slice).
// Replayed: the advances of slices 1..6 and the steps of slices 6..1, each shape's first run a
// warm-up — (6 − 1) + (6 − 1); slice forwards 7 + 8.
struct ReplayCountCase {
  PackedBatch batch;
  Plan plan;
  static constexpr int64_t kReplayed = (6 - 1) + (6 - 1);
  static constexpr int64_t kSliceForwards = 7 + 8;
};

inline ReplayCountCase MakeReplayCountCase(int64_t vocab) {
  ReplayCountCase c;
  for (int64_t i = 0; i < 64; ++i) c.batch.tokens.push_back(i % vocab);
  c.batch.doc_starts = {0};
  c.plan.dtype = DType::kFloat64;
  c.plan.slice = 8;
  c.plan.front_policy = FrontPolicy::kStore;
  return c;
}

// The schedule that keeps every front (HSM with T slots): forward keeping f_0..f_{T−1}, then for
// each slice from the last, restore its front, rebuild and back-propagate it, free the front. 2T
// slice forwards. Written out by hand here: the engine executes schedules, the planner's optimal
// programs (planner/bptt_schedule.h, tested with the engine in //planner:dp_gradient_test) choose
// them.
inline Schedule KeepEveryFront(int64_t slices) {
  using Type = ScheduleAction::Type;
  Schedule schedule;
  schedule.kind = ScheduleKind::kHsm;
  schedule.steps = slices;
  schedule.slots = slices;
  schedule.forward_count = 2 * slices;
  for (int32_t i = 0; i < slices; ++i) {
    schedule.actions.push_back({Type::kKeepFront, i});
    schedule.actions.push_back({Type::kForward, i});
  }
  for (int32_t i = static_cast<int32_t>(slices) - 1; i >= 0; --i) {
    schedule.actions.push_back({Type::kRestore, i});
    schedule.actions.push_back({Type::kForwardBackward, i});
    schedule.actions.push_back({Type::kFreeFront, i});
  }
  return schedule;
}

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_GRADIENT_ENGINE_TEST_CASES_H_
