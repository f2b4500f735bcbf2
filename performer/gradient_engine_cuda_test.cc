// The engine on a CUDA device gives the CPU's gradient: full back-propagation and the sliced
// algorithm for every C, every feature map, LayerNorm placement, prefix mode and front policy, and
// its working memory stays flat in L. Every test skips (GTEST_SKIP) when LibTorch has no CUDA or no
// device is present, so the suite passes unchanged on CPU-only machines; scripts/cuda/ builds and
// runs it against a CUDA LibTorch.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine.h"
#include "performer/gradient_engine_test_cases.h"
#include "performer/memory_tracker.h"
#include "performer/prefix_attention_blocks.h"
#include "performer/replayable_work.h"

namespace slimfit::performer {
namespace {

bool CudaPresent() { return at::hasCUDA(); }

#define SKIP_WITHOUT_CUDA()                                            \
  if (!CudaPresent())                                                  \
  GTEST_SKIP() << "no CUDA device (this LibTorch has no CUDA support " \
                  "or no GPU is visible): nothing to compare on CUDA"

const at::Device kCuda(at::kCUDA, 0);

ModelConfig Config(FeatureMap map, LayerNormPlacement ln) {
  ModelConfig config;
  config.vocab = 97;
  config.d_model = 64;
  config.layers = 2;
  config.heads = 4;
  config.d_ff = 128;
  config.feature_map = map;
  config.feature_multiplier = map == FeatureMap::kFavor ? 2 : 1;
  config.layernorm = ln;
  return config;
}

// `length` tokens in documents of irregular lengths, so document starts fall inside slices.
PackedBatch Stream(int64_t length, int64_t vocab, bool documents = true) {
  PackedBatch batch;
  for (int64_t i = 0; i < length; ++i) batch.tokens.push_back((i * 31 + 7 * (i / 13)) % vocab);
  batch.doc_starts = {0};
  if (documents) {
    for (int64_t start = 37; start < length; start += 37 + start % 29) batch.doc_starts.push_back(start);
  }
  return batch;
}

std::vector<at::Tensor> OnCpu(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : tensors) out.push_back(t.to(at::kCPU));
  return out;
}

class CudaEqualsCpuTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(CudaEqualsCpuTest, FullAndEverySliceSizeGiveTheCpuGradient) {
  SKIP_WITHOUT_CUDA();
  const auto [map, ln, mode, dtype] = GetParam();
  const ModelConfig config = Config(map, ln);
  // The same seed gives the same parameters on every device (drawn in float64 on the CPU).
  absl::StatusOr<PerformerModel> cpu_model = PerformerModel::Create(config, dtype, at::kCPU, 5);
  absl::StatusOr<PerformerModel> cuda_model = PerformerModel::Create(config, dtype, kCuda, 5);
  ASSERT_TRUE(cpu_model.ok()) << cpu_model.status();
  ASSERT_TRUE(cuda_model.ok()) << cuda_model.status();
  const PackedBatch batch = Stream(256, config.vocab);
  const double tolerance = dtype == DType::kFloat64 ? 1e-10 : 1e-5;

  Plan full;
  full.dtype = dtype;
  full.prefix_mode = mode;
  full.block = 16;
  GradientOptions options;
  options.feature_seed = 3;
  const GradientResult cpu = MustCompute(*cpu_model, batch, full, options);
  const GradientResult cuda_full = MustCompute(*cuda_model, batch, full, options);
  ASSERT_EQ(cuda_full.gradients.size(), cpu.gradients.size());
  EXPECT_TRUE(cuda_full.gradients.front().is_cuda());
  EXPECT_LE(RelativeDiscrepancy(OnCpu(cuda_full.gradients), cpu.gradients), tolerance);
  EXPECT_NEAR(cuda_full.loss_sum, cpu.loss_sum, tolerance * cpu.loss_sum);

  for (int64_t slice : {int64_t{1}, int64_t{16}, int64_t{24}, int64_t{64}, int64_t{256}}) {
    Plan plan = full;
    plan.slice = slice;
    const GradientResult sliced = MustCompute(*cuda_model, batch, plan, options);
    EXPECT_LE(RelativeDiscrepancy(OnCpu(sliced.gradients), cpu.gradients), tolerance) << "C=" << slice;
    EXPECT_NEAR(sliced.loss_sum, cpu.loss_sum, tolerance * cpu.loss_sum) << "C=" << slice;
    // Slices without a document start ran as CUDA graphs (the default on CUDA in this build).
    if (ReplayableWork::CudaGraphsBuilt() && slice <= 24) {
      EXPECT_GT(sliced.replayed_slices, 0) << "C=" << slice;
      EXPECT_EQ(sliced.replay_fallback, "") << "C=" << slice;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllConfigurations, CudaEqualsCpuTest, EveryEngineCase(), EngineCaseName);

TEST(CudaGradientTest, EveryFrontPolicyAndLayerRecomputationGivesTheCpuGradient) {
  SKIP_WITHOUT_CUDA();
  const ModelConfig config = Config(FeatureMap::kSqr, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> cpu_model = PerformerModel::Create(config, DType::kFloat32, at::kCPU, 9);
  absl::StatusOr<PerformerModel> cuda_model = PerformerModel::Create(config, DType::kFloat32, kCuda, 9);
  ASSERT_TRUE(cpu_model.ok() && cuda_model.ok());
  const PackedBatch batch = Stream(512, config.vocab);
  Plan full;
  const GradientResult cpu = MustCompute(*cpu_model, batch, full);
  for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore, FrontPolicy::kResync}) {
    for (LayerRecompute recompute : {LayerRecompute::kNone, LayerRecompute::kLayers}) {
      Plan plan;
      plan.slice = 32;
      plan.front_policy = policy;
      plan.resync_every = 4;
      plan.recompute = recompute;
      const GradientResult sliced = MustCompute(*cuda_model, batch, plan);
      EXPECT_LE(RelativeDiscrepancy(OnCpu(sliced.gradients), cpu.gradients), 1e-5) << plan.DebugString();
    }
  }
}

// CUDA graphs against the same slices op by op on the device, for every front policy (dp too),
// with and without layer recomputation, in documents and in one long one.
TEST(CudaGradientTest, SlicesReplayedAsCudaGraphsGiveTheOpByOpGradient) {
  SKIP_WITHOUT_CUDA();
  if (!ReplayableWork::CudaGraphsBuilt())
    GTEST_SKIP() << "this build has no CUDA graphs (SLIMFIT_CUDA_GRAPHS)";
  const ModelConfig config = Config(FeatureMap::kElu1, LayerNormPlacement::kPre);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat32, kCuda, 4);
  ASSERT_TRUE(model.ok()) << model.status();
  for (bool documents : {true, false}) {
    const PackedBatch batch = Stream(768, config.vocab, documents);
    for (FrontPolicy policy :
         {FrontPolicy::kReverse, FrontPolicy::kStore, FrontPolicy::kResync, FrontPolicy::kDp}) {
      for (LayerRecompute recompute : {LayerRecompute::kNone, LayerRecompute::kLayers}) {
        for (int64_t slice : {int64_t{8}, int64_t{48}}) {
          Plan plan;
          plan.slice = slice;
          plan.front_policy = policy;
          plan.resync_every = 3;
          plan.recompute = recompute;
          plan.schedule = ScheduleKind::kHsm;
          plan.slots = (768 + slice - 1) / slice;
          GradientOptions options;
          options.dp_schedule = [](const Plan&, int64_t slices) { return KeepEveryFront(slices); };
          options.slice_replay = SliceReplay::kOff;
          const GradientResult direct = MustCompute(*model, batch, plan, options);
          options.slice_replay = SliceReplay::kAuto;
          const GradientResult replayed = MustCompute(*model, batch, plan, options);
          const std::string what =
              absl::StrCat(plan.DebugString(), documents ? ", documents" : ", one document");
          EXPECT_LE(RelativeDiscrepancy(replayed.gradients, direct.gradients), 1e-6) << what;
          EXPECT_NEAR(replayed.loss_sum, direct.loss_sum, 1e-6 * direct.loss_sum) << what;
          EXPECT_EQ(replayed.slice_forwards, direct.slice_forwards) << what;
          // Documents start every 37 to 65 tokens: only the 8-token slices leave some without one.
          if (!documents || slice == 8) {
            EXPECT_GT(replayed.replayed_slices, 0) << what;
            EXPECT_GT(replayed.graph_pool_bytes, 0) << what << ": the captures' pool";
          }
          EXPECT_EQ(replayed.replay_fallback, "") << what;
        }
      }
    }
  }
}

// Which slices replay on the GPU, counted exactly: backward steps as well as forward advances
// (slice_replay_test counts the same without capture).
TEST(CudaGradientTest, StepsAndAdvancesBothReplay) {
  SKIP_WITHOUT_CUDA();
  if (!ReplayableWork::CudaGraphsBuilt())
    GTEST_SKIP() << "this build has no CUDA graphs (SLIMFIT_CUDA_GRAPHS)";
  const ModelConfig config = Config(FeatureMap::kSqr, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat64, kCuda, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  const ReplayCountCase c = MakeReplayCountCase(config.vocab);
  GradientOptions options;
  options.slice_replay = SliceReplay::kOff;
  const GradientResult direct = MustCompute(*model, c.batch, c.plan, options);
  options.slice_replay = SliceReplay::kAuto;
  const GradientResult replayed = MustCompute(*model, c.batch, c.plan, options);
  EXPECT_EQ(replayed.replayed_slices, ReplayCountCase::kReplayed);
  EXPECT_EQ(replayed.slice_forwards, ReplayCountCase::kSliceForwards);
  EXPECT_LE(RelativeDiscrepancy(replayed.gradients, direct.gradients), 1e-12);
}

// Slices by hand (explicit_backprop.h, the default wherever it applies) against autograd on the
// device, full back-propagation and sliced, with slices replayed as CUDA graphs where built: the
// same gradient and loss (and, in float64, slice forwards), for every feature map (FAVOR+ with the
// same drawn features both ways) and both LayerNorm placements; in float64 to 1e-10, in float32 to
// 1e-5.
TEST(CudaGradientTest, SlicesByHandGiveTheAutogradGradient) {
  SKIP_WITHOUT_CUDA();
  for (FeatureMap map : {FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr, FeatureMap::kFavor}) {
    for (LayerNormPlacement ln : {LayerNormPlacement::kPost, LayerNormPlacement::kPre}) {
      for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
        const ModelConfig config = Config(map, ln);
        absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, dtype, kCuda, 5);
        ASSERT_TRUE(model.ok()) << model.status();
        for (bool documents : {true, false}) {
          const PackedBatch batch = Stream(640, config.vocab, documents);
          for (int64_t slice : {int64_t{0}, int64_t{16}, int64_t{48}, int64_t{320}}) {
            Plan plan;
            plan.dtype = dtype;
            plan.slice = slice;
            GradientOptions options;
            options.feature_seed = 8;
            options.explicit_backprop = false;
            const GradientResult autograd = MustCompute(*model, batch, plan, options);
            options.explicit_backprop = true;
            const GradientResult by_hand = MustCompute(*model, batch, plan, options);
            const std::string what = absl::StrCat(FeatureMapName(map), " ", plan.DebugString(),
                                                  ln == LayerNormPlacement::kPre ? ", pre-LN" : ", post-LN",
                                                  documents ? ", documents" : ", one document");
            const double tolerance = dtype == DType::kFloat64 ? 1e-10 : 1e-5;
            EXPECT_TRUE(by_hand.explicit_backprop) << what;
            EXPECT_FALSE(autograd.explicit_backprop) << what;
            EXPECT_LE(RelativeDiscrepancy(by_hand.gradients, autograd.gradients), tolerance) << what;
            EXPECT_NEAR(by_hand.loss_sum, autograd.loss_sum, tolerance * autograd.loss_sum) << what;
            if (dtype == DType::kFloat64) {  // float32 rounding may tip a front guard's decision
              EXPECT_EQ(by_hand.slice_forwards, autograd.slice_forwards) << what;
              EXPECT_EQ(by_hand.replayed_slices, autograd.replayed_slices) << what;
            }
            EXPECT_EQ(by_hand.replay_fallback, "") << what;
            // One document in 16-token slices: 40 slices, most of them replayed where graphs are built.
            if (ReplayableWork::CudaGraphsBuilt() && !documents && slice == 16) {
              EXPECT_GT(by_hand.replayed_slices, 0) << what;
            }
          }
        }
      }
    }
  }
}

// kAuto leaves calls of few slices, and of slices over 256 tokens, op by op.
TEST(CudaGradientTest, FewOrLargeSlicesRunOpByOp) {
  SKIP_WITHOUT_CUDA();
  const ModelConfig config = Config(FeatureMap::kSqr, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat32, kCuda, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  const PackedBatch batch = Stream(4096, config.vocab, /*documents=*/false);
  for (int64_t slice : {int64_t{512}, int64_t{1024}}) {  // 8 and 4 slices of more than 256 tokens
    Plan plan;
    plan.slice = slice;
    EXPECT_EQ(MustCompute(*model, batch, plan).replayed_slices, 0) << "C=" << slice;
  }
  Plan few;
  few.slice = 16;  // 4 slices
  EXPECT_EQ(MustCompute(*model, Stream(64, config.vocab, /*documents=*/false), few).replayed_slices, 0);
}

// Mixed precision on the device (bfloat16 products, the matrix units' format): the float32 gradient
// to bfloat16 rounding, full and sliced, by hand, with slices replayed as CUDA graphs where they
// would be; the lower bound checks that bfloat16 really ran.
TEST(CudaGradientTest, Bf16ProductsGiveTheFloatGradientToBf16Rounding) {
  SKIP_WITHOUT_CUDA();
  const ModelConfig config = Config(FeatureMap::kElu1, LayerNormPlacement::kPre);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat32, kCuda, 2);
  ASSERT_TRUE(model.ok()) << model.status();
  const PackedBatch batch = Stream(1024, config.vocab);
  Plan full;
  const GradientResult want = MustCompute(*model, batch, full);
  Plan full_bf16 = full;
  full_bf16.bf16_products = true;
  const GradientResult mixed = MustCompute(*model, batch, full_bf16);
  EXPECT_TRUE(mixed.explicit_backprop);
  const double full_error = RelativeDiscrepancy(mixed.gradients, want.gradients);
  EXPECT_GT(full_error, 1e-4) << "no bfloat16 rounding seen";
  EXPECT_LT(full_error, 2e-2);
  for (int64_t slice : {int64_t{16}, int64_t{64}, int64_t{512}}) {
    Plan plan;
    plan.slice = slice;
    plan.bf16_products = true;
    const GradientResult sliced = MustCompute(*model, batch, plan);
    EXPECT_TRUE(sliced.explicit_backprop) << "C=" << slice;
    EXPECT_LT(RelativeDiscrepancy(sliced.gradients, want.gradients), std::min(3 * full_error, 2e-2))
        << "C=" << slice;
    EXPECT_NEAR(sliced.loss(), want.loss(), 1e-3 * want.loss()) << "C=" << slice;
    // Only C = 16 has slices without a document start in this stream (starts are 37–65 apart).
    if (ReplayableWork::CudaGraphsBuilt() && slice == 16) {
      EXPECT_GT(sliced.replayed_slices, 0);
    }
  }
}

// The block-parallel prefix sums (prefix_attention_blocks.h) against block by block on the device,
// with block 16: one long document, whose full gradient walks 128 blocks per layer (two groups),
// slices of 32 blocks (C = 512) and of 3 (C = 48, replayed as graphs where built), and the same
// with documents, whose segments start inside slices.
TEST(CudaGradientTest, BlockParallelPrefixSumsGiveTheBlockByBlockGradient) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    const ModelConfig config = Config(FeatureMap::kSqr, LayerNormPlacement::kPre);
    absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, dtype, kCuda, 6);
    ASSERT_TRUE(model.ok()) << model.status();
    for (bool documents : {false, true}) {
      const PackedBatch batch = Stream(2048, config.vocab, documents);
      for (int64_t slice : {int64_t{0}, int64_t{512}, int64_t{48}}) {
        Plan plan;
        plan.slice = slice;
        plan.block = 16;
        plan.dtype = dtype;
        EnableBlockParallelPrefix(false);
        const GradientResult want = MustCompute(*model, batch, plan);
        EnableBlockParallelPrefix(true);
        const GradientResult got = MustCompute(*model, batch, plan);
        const double tolerance = dtype == DType::kFloat64 ? 1e-10 : 1e-5;
        EXPECT_LE(RelativeDiscrepancy(got.gradients, want.gradients), tolerance)
            << DTypeName(dtype) << " C=" << slice << " documents " << documents;
        EXPECT_NEAR(got.loss(), want.loss(), tolerance * want.loss()) << DTypeName(dtype) << " C=" << slice;
      }
    }
  }
}

TEST(CudaGradientTest, MemoryStatisticsCountTheDevicesAllocations) {
  SKIP_WITHOUT_CUDA();
  absl::StatusOr<MemoryStats> before = GetMemoryStats(kCuda);
  ASSERT_TRUE(before.ok()) << before.status();
  MemoryScope scope(kCuda);
  {
    at::Tensor a = at::ones({4096, 4096}, at::TensorOptions().dtype(at::kFloat).device(kCuda));  // 64 MiB
    EXPECT_GE(GetMemoryStats(kCuda)->current_bytes - before->current_bytes, int64_t{64} << 20);
  }
  EXPECT_EQ(GetMemoryStats(kCuda)->current_bytes, before->current_bytes);
  absl::StatusOr<int64_t> peak = scope.PeakBytes();
  ASSERT_TRUE(peak.ok()) << peak.status();
  EXPECT_GE(*peak - before->current_bytes, int64_t{64} << 20);
}

// The sliced algorithm's point: at fixed C its working memory (peak above the parameters and the
// gradient buffers) does not grow with L, while full back-propagation's does.
TEST(CudaGradientTest, SlicedWorkingMemoryIsFlatInSequenceLength) {
  SKIP_WITHOUT_CUDA();
  const ModelConfig config = Config(FeatureMap::kSqr, LayerNormPlacement::kPost);
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat32, kCuda, 2);
  ASSERT_TRUE(model.ok());
  auto working = [&](int64_t length, int64_t slice) {
    Plan plan;
    plan.slice = slice;
    const GradientResult result =
        MustCompute(*model, Stream(length, config.vocab, /*documents=*/false), plan);
    EXPECT_GT(result.peak_bytes, 0);
    return result.peak_bytes - result.start_bytes;
  };
  const int64_t sliced_short = working(2048, 64);
  const int64_t sliced_long = working(16384, 64);
  const int64_t full_short = working(2048, 0);
  const int64_t full_long = working(16384, 0);
  // The token stream itself (int64 per token on the device) grows with L; allow for it.
  EXPECT_LE(sliced_long, sliced_short + 16 * 16384 + (1 << 20))
      << "sliced working bytes at L=2048: " << sliced_short << ", at L=16384: " << sliced_long;
  EXPECT_GT(full_long, 4 * full_short) << "full back-propagation should grow with L";
}

}  // namespace
}  // namespace slimfit::performer
