// slimfit's own CUDA kernels end to end without a GPU: with the kernels emulated on the CPU
// (fused_cuda_kernels.h), a float64 gradient takes the GPU path's kernels — every dispatch in
// prefix_attention.cc and explicit_backprop.cc, segments of every length, both directions — and
// must give the gradient LibTorch's ops give. What the device adds (launches, streams, graphs) is
// KernelsOnTheDeviceGiveTheCpuGradient below, which skips where there is no GPU.
#include "performer/fused_cuda_kernels.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "performer/gradient_engine.h"
#include "performer/gradient_engine_test_cases.h"
#include "performer/layer_kernels_cuda.h"
#include "performer/prefix_attention_cuda.h"

namespace slimfit::performer {
namespace {

// Turns the emulated kernels on for a scope.
class EmulatedKernels {
 public:
  EmulatedKernels() {
    EmulateFusedCudaKernelsOnCpu(true);
    EnableFusedCudaKernels(true);
  }
  ~EmulatedKernels() {
    EnableFusedCudaKernels(false);
    EmulateFusedCudaKernelsOnCpu(false);
  }
};

// Runs of every kernel since construction.
class KernelRuns {
 public:
  KernelRuns() {
    for (int k = 0; k < kFusedKernelKinds; ++k) before_[k] = FusedKernelRuns(static_cast<FusedKernel>(k));
  }
  int64_t Since(FusedKernel kernel) const {
    return FusedKernelRuns(kernel) - before_[static_cast<int>(kernel)];
  }

 private:
  int64_t before_[kFusedKernelKinds];
};

TEST(FusedCudaKernelsTest, TheSwitchesSayWhereTheKernelsRun) {
  const at::Tensor cpu = at::zeros({2}, at::kDouble);
  EXPECT_FALSE(FusedCudaKernelsEnabled());
  EXPECT_FALSE(FusedCudaKernelsTake(cpu));
  EnableFusedCudaKernels(true);
  EXPECT_EQ(FusedCudaKernelsEnabled(), FusedCudaKernelsBuilt());
  EXPECT_FALSE(FusedCudaKernelsTake(cpu)) << "the CPU only while emulated";
  EnableFusedCudaKernels(false);
  {
    const EmulatedKernels emulated;
    EXPECT_TRUE(FusedCudaKernelsEnabled());
    EXPECT_TRUE(FusedCudaKernelsTake(cpu));
    EXPECT_FALSE(FusedCudaKernelsTake(at::Tensor()));
    EXPECT_TRUE(LayerKernelsCudaApply({&cpu}));
  }
  EXPECT_FALSE(FusedCudaKernelsTake(cpu));
  EXPECT_FALSE(LayerKernelsCudaApply({&cpu}));
}

TEST(FusedCudaKernelsTest, EmulatedKernelsGiveTheGradientOfLibTorchsOps) {
  // sqr under post-LN in full; elu+1 (pre-LN) and FAVOR+ (no head kernels) in documents under the
  // reverse policy. (Each emulated kernel starts its host threads afresh: the test is kept to what
  // each dispatch needs.)
  for (auto [map, ln] : {std::pair{FeatureMap::kSqr, LayerNormPlacement::kPost},
                         {FeatureMap::kElu1, LayerNormPlacement::kPre},
                         {FeatureMap::kFavor, LayerNormPlacement::kPre}}) {
    const bool all = map == FeatureMap::kSqr;
    const ModelConfig config = SmallEngineConfig(map, ln);
    const PerformerModel model = MustCreateModel(config, DType::kFloat64, 3);
    for (bool documents : {true, false}) {
      if (!documents && !all) continue;
      PackedBatch batch = FiveDocumentStream(config.vocab);
      if (!documents) batch.doc_starts = {0};
      // The reverse policy (entry fronts by FrontWithout), and the store policy (none).
      for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore}) {
        if (policy == FrontPolicy::kStore && !all) continue;
        // Full (segments of every length up to 45 rows in documents: one, two and more blocks of 16),
        // and slices of one row (once: 120 slices), one block, and one and a half blocks.
        for (int64_t slice : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{24}}) {
          if (slice == 1 && (!all || !documents)) continue;
          for (bool by_hand : {true, false}) {
            Plan plan;
            plan.dtype = DType::kFloat64;
            plan.block = 16;
            plan.slice = slice;
            plan.front_policy = policy;
            GradientOptions options;
            options.feature_seed = 4;
            options.explicit_backprop = by_hand;
            const GradientResult ops = MustCompute(model, batch, plan, options);
            GradientResult kernels;
            const KernelRuns runs;
            {
              const EmulatedKernels emulated;
              kernels = MustCompute(model, batch, plan, options);
            }
            const std::string what = absl::StrCat(FeatureMapName(map), " ", plan.DebugString(),
                                                  documents ? ", documents" : ", one document",
                                                  by_hand ? ", by hand" : ", autograd");
            // The kernels did run, wherever the dispatch should take them: prefix sums for slices of
            // at most two blocks (and full back-propagation's short documents), the entry fronts under
            // the reverse policy, the row kernels on the hand-written path (head split and join for the
            // elementwise maps only); and nowhere else.
            const bool short_segments = slice > 0 || documents;
            EXPECT_EQ(runs.Since(FusedKernel::kPrefixForward) > 0, short_segments) << what;
            EXPECT_EQ(runs.Since(FusedKernel::kPrefixBackward) > 0, short_segments) << what;
            if (policy == FrontPolicy::kStore) {
              EXPECT_EQ(runs.Since(FusedKernel::kFrontWithout), 0) << what;  // every entry is kept
            } else if (!documents) {  // in documents the guard may keep every entry of so few slices
              EXPECT_EQ(runs.Since(FusedKernel::kFrontWithout) > 0, slice > 0) << what;
            }
            const bool elementwise = map != FeatureMap::kFavor;
            EXPECT_EQ(runs.Since(FusedKernel::kSplitHeads) > 0, by_hand && elementwise) << what;
            EXPECT_EQ(runs.Since(FusedKernel::kJoinHeadGradients) > 0, by_hand && elementwise) << what;
            for (FusedKernel row : {FusedKernel::kEmbed, FusedKernel::kNormalizeAttention,
                                    FusedKernel::kNormalizeAttentionBackward, FusedKernel::kColumnSums,
                                    FusedKernel::kLayerNormBackward}) {
              EXPECT_EQ(runs.Since(row) > 0, by_hand) << what << ": " << FusedKernelName(row);
            }
            EXPECT_EQ(runs.Since(FusedKernel::kLayerNormAdd) > 0, by_hand && ln == LayerNormPlacement::kPost)
                << what;
            EXPECT_EQ(kernels.explicit_backprop, by_hand) << what;
            EXPECT_LE(RelativeDiscrepancy(kernels.gradients, ops.gradients), 1e-12) << what;
            EXPECT_NEAR(kernels.loss_sum, ops.loss_sum, 1e-12 * ops.loss_sum) << what;
            EXPECT_EQ(kernels.slice_forwards, ops.slice_forwards) << what;
          }
        }
      }
    }
  }
}

std::vector<at::Tensor> OnCpu(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : tensors) out.push_back(t.to(at::kCPU));
  return out;
}

// The kernels themselves on a GPU, in this binary of their own (a fault in them — a sticky CUDA
// error — ends only it): full back-propagation and slices of one and two blocks give the CPU's
// gradient, by hand and through autograd, replayed as CUDA graphs where built, for elementwise
// feature maps (row kernels) and FAVOR+ (not), both LayerNorm placements, float64 and float32.
TEST(FusedCudaKernelsTest, KernelsOnTheDeviceGiveTheCpuGradient) {
  if (!FusedCudaKernelsBuilt())
    GTEST_SKIP() << "this build has no fused CUDA kernels (SLIMFIT_WITH_CUDA_KERNELS)";
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: nothing to run the kernels on";
  const at::Device cuda(at::kCUDA, 0);
  for (auto [map, ln] : {std::pair{FeatureMap::kSqr, LayerNormPlacement::kPost},
                         {FeatureMap::kElu1, LayerNormPlacement::kPre},
                         {FeatureMap::kFavor, LayerNormPlacement::kPost}}) {
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      const ModelConfig config = SmallEngineConfig(map, ln);
      const PerformerModel cpu_model = MustCreateModel(config, dtype, 6);
      const PerformerModel cuda_model = MustCreateModel(config, dtype, 6, cuda);
      const PackedBatch batch = FiveDocumentStream(config.vocab);
      Plan full;
      full.dtype = dtype;
      full.block = 16;
      GradientOptions options;
      options.feature_seed = 2;
      const GradientResult cpu = MustCompute(cpu_model, batch, full, options);
      const double tolerance = dtype == DType::kFloat64 ? 1e-10 : 1e-5;
      for (int64_t slice : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{24}, int64_t{32}}) {
        for (bool by_hand : {true, false}) {
          Plan plan = full;
          plan.slice = slice;
          options.explicit_backprop = by_hand;
          const KernelRuns runs;
          EnableFusedCudaKernels(true);
          const GradientResult fused = MustCompute(cuda_model, batch, plan, options);
          EnableFusedCudaKernels(false);
          const std::string what = absl::StrCat(FeatureMapName(map), " ", plan.DebugString(),
                                                by_hand ? ", by hand" : ", autograd");
          EXPECT_GT(runs.Since(FusedKernel::kPrefixBackward), 0) << what;  // documents: short segments
          EXPECT_EQ(runs.Since(FusedKernel::kNormalizeAttentionBackward) > 0, by_hand) << what;
          EXPECT_EQ(fused.explicit_backprop, by_hand) << what;
          EXPECT_LE(RelativeDiscrepancy(OnCpu(fused.gradients), cpu.gradients), tolerance) << what;
          EXPECT_NEAR(fused.loss_sum, cpu.loss_sum, tolerance * cpu.loss_sum) << what;
          EXPECT_EQ(fused.replay_fallback, "") << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace slimfit::performer
