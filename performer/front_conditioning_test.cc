// The subtracting front policies stay precise where denominators grow by orders of magnitude
// (sliced_gradient.h, "Conditioning"): a stream whose first keys have near-zero features, then
// ordinary ones, so the first fronts' denominators are ~10⁻⁶ of the later ones'. Rebuilt by
// subtraction from a later front, such a front would be float32 rounding noise; the sweep keeps the
// fronts where that would happen, and `reverse` and `resync` come out as precise as `store`. Every
// case runs on the CPU and, where LibTorch has a GPU, on CUDA (its slices replayed as CUDA graphs
// where the engine's rule replays them); the CUDA cases skip without one.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine.h"
#include "performer/gradient_engine_test_cases.h"
#include "performer/replayable_work.h"
#include "performer/slice_replay_rule.h"

namespace slimfit::performer {
namespace {

// Every layer-0 key is `bias + weight · e` with e the first embedding coordinate, `first[token]`
// (0 past its end); the layer's queries and values do not see that coordinate.
void SetFirstLayerKeys(const PerformerModel& model, const std::vector<double>& first, double weight,
                       double bias) {
  at::NoGradGuard no_grad;
  const std::vector<std::string>& names = model.names();
  for (size_t i = 0; i < names.size(); ++i) {
    at::Tensor p = model.parameters()[i];
    if (names[i] == "input_map.weight") {
      p.select(1, 0).fill_(0);
      for (size_t t = 0; t < first.size(); ++t) p[static_cast<int64_t>(t)][0].fill_(first[t]);
    } else if (names[i] == "layers.0.attention.k_map.weight") {
      p.fill_(0);
      p.select(1, 0).fill_(weight);
    } else if (names[i] == "layers.0.attention.k_map.bias") {
      p.fill_(bias);
    } else if (names[i] == "layers.0.attention.q_map.weight" ||
               names[i] == "layers.0.attention.v_map.weight") {
      p.select(1, 0).fill_(0);
    }
  }
}

// Layer 0 split by feature. Token 0's keys are `small_key` on the first half of each head's
// coordinates and `ordinary_key` on the rest, every other token's `ordinary_key` everywhere; every
// query is `weighed_query` on the first half and `ignored_query` on the rest. Each head's total
// grows only as the tokens do, but the queries weigh the features token 0 barely has, so over the
// first fronts their denominators are ~10⁻⁶ of the later fronts' (the shape of a fuzzing input for
// relu: a check of head totals alone misses it).
void SetHalfFeatureAttention(const PerformerModel& model, double small_key, double ordinary_key,
                             double weighed_query, double ignored_query) {
  at::NoGradGuard no_grad;
  const int64_t head_dim = model.config().d_model / model.config().heads;
  auto first_half = [&](int64_t row) { return row % head_dim < head_dim / 2; };
  const std::vector<std::string>& names = model.names();
  for (size_t i = 0; i < names.size(); ++i) {
    at::Tensor p = model.parameters()[i];
    if (names[i] == "input_map.weight") {
      p.select(1, 0).fill_(0);
      p[0][0].fill_(1);
    } else if (names[i] == "layers.0.attention.k_map.weight") {
      p.fill_(0);
      for (int64_t row = 0; row < p.size(0); ++row) {
        if (first_half(row)) p[row][0].fill_(small_key - ordinary_key);
      }
    } else if (names[i] == "layers.0.attention.k_map.bias") {
      p.fill_(ordinary_key);
    } else if (names[i] == "layers.0.attention.q_map.weight") {
      p.fill_(0);
    } else if (names[i] == "layers.0.attention.q_map.bias") {
      for (int64_t row = 0; row < p.size(0); ++row)
        p[row].fill_(first_half(row) ? weighed_query : ignored_query);
    } else if (names[i] == "layers.0.attention.v_map.weight") {
      p.select(1, 0).fill_(0);
    }
  }
}

// Token 0's keys `bias + weight` in every coordinate, every other token's `bias`.
std::function<void(const PerformerModel&)> TokenZeroKeys(double weight, double bias) {
  return [=](const PerformerModel& model) { SetFirstLayerKeys(model, {1}, weight, bias); };
}

// `near_zero` tokens 0, then tokens cycling through 1..vocab−1: one document.
PackedBatch NearZeroThenOrdinary(int64_t near_zero, int64_t ordinary, int64_t vocab) {
  PackedBatch batch;
  for (int64_t i = 0; i < near_zero; ++i) batch.tokens.push_back(0);
  for (int64_t i = 0; i < ordinary; ++i) batch.tokens.push_back(1 + (i * 5) % (vocab - 1));
  return batch;
}

// The replay path on `device`: on the CPU SliceReplay::kRerun (what CUDA graphs run, without
// capture), on a GPU the real graphs (kAuto).
GradientOptions ReplayOptions(at::Device device) {
  GradientOptions options;
  options.slice_replay = device.is_cuda() ? SliceReplay::kAuto : SliceReplay::kRerun;
  return options;
}

// Whether ReplayOptions(device) replays some of a call's `slices` slices of `slice` tokens.
bool ExpectReplays(at::Device device, int64_t slices, int64_t slice) {
  if (!device.is_cuda()) return true;
  return ReplayableWork::CudaGraphsBuilt() && AutoReplaysSlices(slices, slice);
}

// Each case on the CPU and on CUDA; the CUDA instances skip where LibTorch has no GPU.
class FrontConditioningTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (device().is_cuda() && !at::hasCUDA()) GTEST_SKIP() << "no CUDA device: nothing to run on CUDA";
  }
  at::Device device() const { return at::Device(GetParam()); }
};

struct Sliced {
  FrontPolicy policy;
  int64_t resync_every = 0;
};

std::string Name(const Sliced& s) { return std::string(FrontPolicyName(s.policy)); }

// Gradients of `batch` in float32 at C = `slice` under each subtracting policy (resync keeping every
// `resync_every`-th front) and under `store`, against float64 full back-propagation of the same
// model, all on `device`; and the same calls through the replay path, which must give the same
// gradient.
void ExpectAsPreciseAsStore(at::Device device, FeatureMap map,
                            const std::function<void(const PerformerModel&)>& shape_model,
                            const PackedBatch& batch, int64_t slice, bool expect_second_sweep,
                            int64_t resync_every = 3) {
  const ModelConfig config = SmallEngineConfig(map);
  const PerformerModel model32 = MustCreateModel(config, DType::kFloat32, 3, device);
  const PerformerModel model64 = MustCreateModel(config, DType::kFloat64, 3, device);
  shape_model(model32);
  shape_model(model64);
  Plan full;
  full.dtype = DType::kFloat64;
  const GradientResult exact = MustCompute(model64, batch, full);

  Plan store;
  store.slice = slice;
  store.front_policy = FrontPolicy::kStore;
  const GradientResult stored = MustCompute(model32, batch, store);
  const double store_error = RelativeDiscrepancy(stored.gradients, exact.gradients);
  EXPECT_EQ(stored.conditioning_fronts, 0) << "store keeps every front anyway";

  const int64_t slices = (batch.size() + slice - 1) / slice;
  for (const Sliced& s : {Sliced{FrontPolicy::kReverse}, Sliced{FrontPolicy::kResync, resync_every}}) {
    Plan plan;
    plan.slice = slice;
    plan.front_policy = s.policy;
    plan.resync_every = s.resync_every;
    const GradientResult result = MustCompute(model32, batch, plan);
    const double error = RelativeDiscrepancy(result.gradients, exact.gradients);
    std::printf(
        "%s, %s, C = %lld, %s: rel. discrepancy %.3g (store %.3g), fronts kept %lld, recomputed %lld, "
        "slice forwards %lld of %lld\n",
        device.str().c_str(), std::string(FeatureMapName(map)).c_str(), static_cast<long long>(slice),
        Name(s).c_str(), error, store_error, static_cast<long long>(result.conditioning_fronts),
        static_cast<long long>(result.conditioning_fronts_recomputed),
        static_cast<long long>(result.slice_forwards), static_cast<long long>(2 * slices - 1));
    EXPECT_GE(result.conditioning_fronts, 1) << Name(s);
    EXPECT_EQ(result.conditioning_fronts_recomputed, 0) << Name(s);
    EXPECT_LE(error, 4 * store_error + 1e-6) << Name(s) << ": store's error " << store_error;
    EXPECT_EQ(result.slice_forwards, 2 * slices - 1 + result.conditioning_forwards) << Name(s);
    // A stretch of three slices that grew past the bound by itself is swept again slice by slice.
    if (expect_second_sweep) {
      EXPECT_GT(result.slice_forwards, 2 * slices - 1) << Name(s);
    } else {
      EXPECT_EQ(result.slice_forwards, 2 * slices - 1) << Name(s);
    }
    const GradientResult replayed = MustCompute(model32, batch, plan, ReplayOptions(device));
    if (ExpectReplays(device, slices, slice)) {
      EXPECT_GT(replayed.replayed_slices, 0) << Name(s);
    }
    EXPECT_EQ(replayed.conditioning_fronts, result.conditioning_fronts) << Name(s);
    EXPECT_EQ(replayed.slice_forwards, 2 * slices - 1 + replayed.conditioning_forwards) << Name(s);
    EXPECT_LE(RelativeDiscrepancy(replayed.gradients, result.gradients), 1e-6) << Name(s) << ", replayed";
    // The same in float64: the same keeps (the bound is on growth, whatever the dtype), exact.
    Plan plan64 = plan;
    plan64.dtype = DType::kFloat64;
    const GradientResult result64 = MustCompute(model64, batch, plan64);
    EXPECT_EQ(result64.conditioning_fronts, result.conditioning_fronts) << Name(s);
    EXPECT_LE(RelativeDiscrepancy(result64.gradients, exact.gradients), 1e-10) << Name(s);
  }
}

// relu: token 0's key features are ~10⁻⁶ (not exactly zero: relu's onset bookkeeping restores only
// exact zeros). The sweep goes slice by slice (relu), so keeps fall on the exact boundary.
TEST_P(FrontConditioningTest, ReluFeaturesNearZeroAtTheStart) {
  const PackedBatch batch = NearZeroThenOrdinary(8, 16, SmallEngineConfig(FeatureMap::kRelu).vocab);
  ExpectAsPreciseAsStore(device(), FeatureMap::kRelu, TokenZeroKeys(/*weight=*/1e-6 - 1, /*bias=*/1), batch,
                         /*slice=*/4, /*expect_second_sweep=*/false);
}

// elu+1: token 0's key features are e⁻¹⁴ ≈ 8·10⁻⁷. The sweep runs three slices at a time once a
// run's floor is known, so the jump falls inside a stretch, which is swept again slice by slice.
TEST_P(FrontConditioningTest, EluFeaturesNearZeroAtTheStartInsideAStretch) {
  const PackedBatch batch = NearZeroThenOrdinary(8, 40, SmallEngineConfig(FeatureMap::kElu1).vocab);
  ExpectAsPreciseAsStore(device(), FeatureMap::kElu1, TokenZeroKeys(/*weight=*/-14, /*bias=*/0), batch,
                         /*slice=*/4, /*expect_second_sweep=*/true);
}

// elu+1 with the features split: token 0's first-half key features e⁻¹⁴, the queries weighing the
// first half (2 against e⁻¹⁴). Each head's total only grows as the tokens do, so the sweep must
// measure every feature's growth to keep the first fronts exact.
TEST_P(FrontConditioningTest, EluQueriesWeighTheFeaturesTheFirstFrontsLack) {
  const PackedBatch batch = NearZeroThenOrdinary(8, 40, SmallEngineConfig(FeatureMap::kElu1).vocab);
  ExpectAsPreciseAsStore(
      device(), FeatureMap::kElu1,
      [](const PerformerModel& model) {
        SetHalfFeatureAttention(model, /*small_key=*/-14, /*ordinary_key=*/0, /*weighed_query=*/1,
                                /*ignored_query=*/-14);
      },
      batch, /*slice=*/4, /*expect_second_sweep=*/true);
}

// The same for x²: token 0's first-half key features 10⁻⁶, the queries' other features 10⁻⁶.
TEST_P(FrontConditioningTest, SqrQueriesWeighTheFeaturesTheFirstFrontsLack) {
  const PackedBatch batch = NearZeroThenOrdinary(8, 40, SmallEngineConfig(FeatureMap::kSqr).vocab);
  ExpectAsPreciseAsStore(
      device(), FeatureMap::kSqr,
      [](const PerformerModel& model) {
        SetHalfFeatureAttention(model, /*small_key=*/1e-3, /*ordinary_key=*/1, /*weighed_query=*/1,
                                /*ignored_query=*/1e-3);
      },
      batch, /*slice=*/4, /*expect_second_sweep=*/true);
}

// Two documents, each starting with near-zero keys: each document's fronts begin anew (the floor
// restarts at the document start), and each needs its own keep.
TEST_P(FrontConditioningTest, EveryDocumentStartsItsOwnRun) {
  const int64_t vocab = SmallEngineConfig(FeatureMap::kElu1).vocab;
  PackedBatch batch = NearZeroThenOrdinary(8, 28, vocab);
  const PackedBatch second = NearZeroThenOrdinary(8, 28, vocab);
  batch.doc_starts = {0, batch.size()};
  batch.tokens.insert(batch.tokens.end(), second.tokens.begin(), second.tokens.end());
  ExpectAsPreciseAsStore(device(), FeatureMap::kElu1, TokenZeroKeys(/*weight=*/-14, /*bias=*/0), batch,
                         /*slice=*/4, /*expect_second_sweep=*/true, /*resync_every=*/5);
}

// No more than kMaxConditioningFronts keeps in a call, where every slice would need one: sqr
// features of keys 10^1.5 larger in each slice than in the last (features 1000× larger). The rest
// are recomputed by forwards from the nearest exact front, and the gradient is as precise as
// store's.
TEST_P(FrontConditioningTest, KeepsAreBoundedAndTheRestRecomputed) {
  const ModelConfig config = SmallEngineConfig(FeatureMap::kSqr);
  const PerformerModel model = MustCreateModel(config, DType::kFloat32, 3, device());
  const PerformerModel model64 = MustCreateModel(config, DType::kFloat64, 3, device());
  const int64_t slice = 4, slices = 12;
  std::vector<double> first;
  for (int64_t j = 0; j < 10; ++j) first.push_back(std::pow(10.0, -7 + 1.5 * static_cast<double>(j)));
  SetFirstLayerKeys(model, first, /*weight=*/1, /*bias=*/0);
  SetFirstLayerKeys(model64, first, /*weight=*/1, /*bias=*/0);
  PackedBatch batch;
  for (int64_t i = 0; i < slice * slices; ++i) batch.tokens.push_back(std::min<int64_t>(i / slice, 9));
  Plan full;
  full.dtype = DType::kFloat64;
  const GradientResult exact = MustCompute(model64, batch, full);
  Plan plan;
  plan.slice = slice;
  const GradientResult result = MustCompute(model, batch, plan);
  EXPECT_EQ(result.conditioning_fronts, kMaxConditioningFronts);
  EXPECT_GE(result.conditioning_fronts_recomputed, 3);
  EXPECT_EQ(result.stored_fronts_peak, kMaxConditioningFronts);
  EXPECT_GT(result.slice_forwards, 2 * slices - 1 + 3);  // the recomputations
  EXPECT_EQ(result.slice_forwards, 2 * slices - 1 + result.conditioning_forwards);
  plan.front_policy = FrontPolicy::kStore;
  const GradientResult stored = MustCompute(model, batch, plan);
  EXPECT_LE(RelativeDiscrepancy(result.gradients, exact.gradients),
            4 * RelativeDiscrepancy(stored.gradients, exact.gradients) + 1e-6);
  // Through the replay path: the recomputations' forwards and the steps from recomputed fronts.
  plan.front_policy = FrontPolicy::kReverse;
  const GradientResult replayed = MustCompute(model, batch, plan, ReplayOptions(device()));
  if (ExpectReplays(device(), slices, slice)) {
    EXPECT_GT(replayed.replayed_slices, 0);
  }
  EXPECT_EQ(replayed.conditioning_fronts_recomputed, result.conditioning_fronts_recomputed);
  EXPECT_EQ(replayed.slice_forwards, 2 * slices - 1 + replayed.conditioning_forwards);
  EXPECT_LE(RelativeDiscrepancy(replayed.gradients, result.gradients), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Devices, FrontConditioningTest, ::testing::Values("cpu", "cuda:0"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "cpu" ? std::string("cpu") : std::string("cuda");
                         });

}  // namespace
}  // namespace slimfit::performer
