#include "planner/cost_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "performer/sweep_stretch_rule.h"
#include "planner/bptt_schedule.h"

namespace slimfit::planner {
namespace {

using performer::FrontPolicy;
using performer::ModelConfig;
using performer::Plan;
using performer::PrefixMode;

ModelConfig ConfigA() {
  ModelConfig c;
  c.d_model = 256;
  c.layers = 2;
  c.heads = 4;
  c.d_ff = 1024;
  return c;
}

DeviceProfile Profile() {
  DeviceProfile p;
  p.activation_scale = 1.0;
  p.activation_overhead_bytes = 1000;
  p.flops_per_second = 1e11;
  p.half_rate_rows = 30;
  p.seconds_per_element = 1e-9;
  p.layer_overhead_s = 1e-4;
  return p;
}

Plan Sliced(int64_t c, FrontPolicy policy = FrontPolicy::kReverse) {
  Plan plan;
  plan.slice = c;
  plan.front_policy = policy;
  return plan;
}

TEST(CostModelTest, FrontBytesCountEveryLayersNumeratorAndDenominator) {
  EXPECT_EQ(FrontBytes(ConfigA(), performer::DType::kFloat32), 2 * 4 * 64 * 65 * 4);
  EXPECT_EQ(FrontBytes(ConfigA(), performer::DType::kFloat64), 2 * 4 * 64 * 65 * 8);
}

TEST(CostModelTest, PeakIsTheSumOfItsParts) {
  const Workload w{ConfigA(), 4096};
  absl::StatusOr<Prediction> p = Predict(w, Sliced(256), Profile());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->parameter_bytes, ConfigA().parameter_count() * 4);
  EXPECT_EQ(p->gradient_bytes, p->parameter_bytes);
  EXPECT_EQ(p->optimizer_bytes, 0);
  // reverse: room for the fronts the sweep may keep to stay precise (performer::kMaxConditioningFronts).
  EXPECT_EQ(p->kept_bytes,
            performer::kMaxConditioningFronts * FrontBytes(ConfigA(), performer::DType::kFloat32));
  EXPECT_EQ(p->resident_bytes, 0);
  EXPECT_EQ(p->peak_bytes, p->parameter_bytes + p->gradient_bytes + p->kept_bytes + p->working_bytes);
  Workload adam = w;
  adam.optimizer_bytes_per_parameter = 8;
  EXPECT_EQ(Predict(adam, Sliced(256), Profile())->optimizer_bytes, ConfigA().parameter_count() * 8);
}

TEST(CostModelTest, SmallCpuSlicesCountTheirBatchedWeightGradientBuffers) {
  const Workload w{ConfigA(), 4096};
  const ModelConfig& m = w.model;
  // 64 rows of every linear map's input and output: q|k|v, the FFN's two maps, the output head.
  const int64_t widths = m.layers * (6 * m.d_model + 2 * m.d_ff) + m.d_model + m.vocab;
  EXPECT_EQ(BatchedWeightGradientBytes(m, Sliced(16), Profile()), 64 * widths * 4);
  EXPECT_EQ(BatchedWeightGradientBytes(m, Sliced(64), Profile()), 0);  // a slice fills a product
  EXPECT_EQ(BatchedWeightGradientBytes(m, Sliced(0), Profile()), 0);
  DeviceProfile cuda = Profile();
  cuda.device = "cuda:0";
  EXPECT_EQ(BatchedWeightGradientBytes(m, Sliced(16), cuda), 0);  // batching is the CPU's
  Plan recomputed = Sliced(16);
  recomputed.recompute = performer::LayerRecompute::kLayers;
  EXPECT_EQ(BatchedWeightGradientBytes(m, recomputed, Profile()), 0);  // through autograd
  ModelConfig favor = m;                                               // FAVOR+ runs by hand too
  favor.feature_map = performer::FeatureMap::kFavor;
  EXPECT_EQ(BatchedWeightGradientBytes(favor, Sliced(16), Profile()), 64 * widths * 4);
  // In the working set of the plans that have them, next to what the same plan on CUDA holds.
  EXPECT_EQ(Predict(w, Sliced(16), Profile())->working_bytes - Predict(w, Sliced(16), cuda)->working_bytes,
            64 * widths * 4 + (m.forward_layout_values(true) - m.forward_layout_values(false)) * 4);
}

TEST(CostModelTest, TheDevicesResidentOverheadIsInEveryPeakOnce) {
  const Workload w{ConfigA(), 4096};
  DeviceProfile cuda = Profile();
  cuda.device = "cuda:0";
  DeviceProfile with_workspaces = cuda;
  with_workspaces.resident_overhead_bytes = int64_t{65} << 20;
  for (int64_t c : {0, 16, 256}) {
    for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore}) {
      if (c == 0 && policy != FrontPolicy::kReverse) continue;
      const Prediction without = *Predict(w, Sliced(c, policy), cuda);
      const Prediction with = *Predict(w, Sliced(c, policy), with_workspaces);
      EXPECT_EQ(with.resident_bytes, int64_t{65} << 20) << "C = " << c;
      EXPECT_EQ(with.peak_bytes - without.peak_bytes, int64_t{65} << 20) << "C = " << c;
      EXPECT_EQ(with.working_bytes, without.working_bytes) << "C = " << c;
      EXPECT_EQ(with.seconds, without.seconds) << "C = " << c;
    }
  }
}

// The CUDA graphs' pool: in the peak of exactly the calls the engine replays (at least 8 slices of
// at most 256 tokens) on a device that replays, as the two captured computations' scratch and the
// allocator's rounding.
TEST(CostModelTest, TheGraphsPoolIsInThePeakOfCallsWhoseSlicesReplay) {
  DeviceProfile cuda = Profile();
  cuda.device = "cuda:0";
  DeviceProfile replaying = cuda;
  replaying.replays_slices = true;
  replaying.graph_pool_overhead_bytes = int64_t{16} << 20;
  struct Case {
    int64_t seq_len;
    int64_t slice;
    bool replays;
  };
  for (const Case& c :
       {Case{4096, 16, true}, Case{4096, 256, true}, Case{2048, 256, true}, Case{1793, 256, true},
        Case{1792, 256, false} /* 7 slices */, Case{4096, 512, false}, Case{4096, 0, false}}) {
    const Workload w{ConfigA(), c.seq_len};
    for (FrontPolicy policy : {FrontPolicy::kReverse, FrontPolicy::kStore}) {
      if (c.slice == 0 && policy != FrontPolicy::kReverse) continue;
      const Plan plan = Sliced(c.slice, policy);
      const Prediction without = *Predict(w, plan, cuda);
      const Prediction with = *Predict(w, plan, replaying);
      // The forward sweep's stretch: kSweepSlices slices (one under store), at most L tokens, at
      // 2·d_ff + 7·d_model values per token.
      const int64_t stretch = std::min<int64_t>(
          (policy == FrontPolicy::kStore ? 1 : performer::kSweepSlices) * c.slice, c.seq_len);
      const int64_t pool = c.replays ? SliceGraphBytes(w.model, c.slice, plan, replaying) +
                                           stretch * (2 * 1024 + 7 * 256) * 4 + (int64_t{16} << 20)
                                     : 0;
      const std::string what =
          absl::StrCat("L = ", c.seq_len, ", C = ", c.slice, ", ", performer::FrontPolicyName(policy));
      EXPECT_EQ(with.graph_pool_bytes, pool) << what;
      EXPECT_EQ(GraphPoolBytes(w.model, c.seq_len, plan, replaying), pool) << what;
      EXPECT_EQ(with.peak_bytes - without.peak_bytes, pool) << what;
      EXPECT_EQ(without.graph_pool_bytes, 0) << what;
      EXPECT_EQ(with.working_bytes, without.working_bytes) << what;
      EXPECT_EQ(with.seconds, without.seconds) << what;
    }
  }
  // resync replays steps from kept fronts and by subtraction: two step graphs. A profile that is
  // not a CUDA device's replays nothing, whatever it says.
  Plan resync = Sliced(64, FrontPolicy::kResync);
  resync.resync_every = 8;
  EXPECT_EQ(GraphPoolBytes(ConfigA(), 4096, resync, replaying),
            2 * SliceGraphBytes(ConfigA(), 64, resync, replaying) + 3 * 64 * (2 * 1024 + 7 * 256) * 4 +
                (int64_t{16} << 20));
  // dp's schedule advances slice by slice: its stretch is one slice.
  Plan dp = Sliced(64, FrontPolicy::kDp);
  dp.slots = 4;
  EXPECT_EQ(
      GraphPoolBytes(ConfigA(), 4096, dp, replaying),
      SliceGraphBytes(ConfigA(), 64, dp, replaying) + 64 * (2 * 1024 + 7 * 256) * 4 + (int64_t{16} << 20));
  DeviceProfile cpu = replaying;
  cpu.device = "cpu";
  EXPECT_EQ(GraphPoolBytes(ConfigA(), 4096, Sliced(64), cpu), 0);
}

TEST(CostModelTest, OneWeightLayoutSavesTheForwardCopiesAndCostsTime) {
  const Workload w{ConfigA(), 4096};
  for (int64_t c : {0, 64}) {
    Plan one = Sliced(c);
    one.copy_forward_weights = false;
    const Prediction copies = *Predict(w, Sliced(c), Profile());
    const Prediction single = *Predict(w, one, Profile());
    const ModelConfig& m = w.model;
    EXPECT_EQ(copies.working_bytes - single.working_bytes,
              (m.forward_layout_values(true) - m.forward_layout_values(false)) * 4);
    EXPECT_DOUBLE_EQ(single.seconds, copies.seconds * 1.15);
  }
  // A CPU engine without oneDNN (a CUDA build's CPU worker) makes none either: its profile says so.
  DeviceProfile without_onednn = Profile();
  without_onednn.forward_weight_copies = false;
  EXPECT_FALSE(ForwardCopiesApply(without_onednn, performer::DType::kFloat32, false));
  EXPECT_TRUE(ForwardCopiesApply(Profile(), performer::DType::kFloat32, false));
  EXPECT_FALSE(ForwardCopiesApply(Profile(), performer::DType::kFloat32, /*bf16_products=*/true));
  EXPECT_EQ(Predict(w, Sliced(64), without_onednn)->working_bytes,
            Predict(w, Sliced(64), Profile())->working_bytes -
                (w.model.forward_layout_values(true) - w.model.forward_layout_values(false)) * 4);
  // On CUDA and in float64 the engine makes no such copies: the flag changes nothing.
  DeviceProfile cuda = Profile();
  cuda.device = "cuda:0";
  Plan one = Sliced(64);
  one.copy_forward_weights = false;
  EXPECT_EQ(Predict(w, one, cuda)->peak_bytes, Predict(w, Sliced(64), cuda)->peak_bytes);
  one.dtype = performer::DType::kFloat64;
  Plan f64 = Sliced(64);
  f64.dtype = performer::DType::kFloat64;
  EXPECT_EQ(Predict(w, one, Profile())->peak_bytes, Predict(w, f64, Profile())->peak_bytes);
}

// bfloat16 products: their operands' and results' bfloat16 copies in the working set (at the
// computation's rows: the sweep's stretch or the slice, whichever is larger), a bfloat16 copy of
// every linear weight in place of the float32 forward copies, and the device's bfloat16 constants
// on the linear maps' products alone.
TEST(CostModelTest, Bf16ProductsAddTheirCopiesAndTheirOwnTimeConstants) {
  const Workload w{ConfigA(), 4096};
  const ModelConfig& m = w.model;
  EXPECT_EQ(Bf16ProductBytes(m, 64), 2 * 64 * (256 + 1024));
  ModelConfig wide_vocabulary = m;  // the output map's product is the largest
  wide_vocabulary.vocab = 32000;
  EXPECT_EQ(Bf16ProductBytes(wide_vocabulary, 64), 2 * 64 * (256 + 32000));
  DeviceProfile profile = Profile();
  profile.bf16_flops_per_second = 2.5 * profile.flops_per_second;  // float32's constants otherwise
  profile.bf16_half_rate_rows = profile.half_rate_rows;
  profile.bf16_layer_overhead_s = profile.layer_overhead_s;
  DeviceProfile cuda = profile;
  cuda.device = "cuda:0";
  // The largest weight-gradient product: the FFN's (d·d_ff) here, the output map's for a wide
  // vocabulary; on a CPU through a float32 copy as well.
  EXPECT_EQ(Bf16WeightGradientBytes(m, profile), 6 * 256 * 1024);
  EXPECT_EQ(Bf16WeightGradientBytes(m, cuda), 2 * 256 * 1024);
  EXPECT_EQ(Bf16WeightGradientBytes(wide_vocabulary, cuda), 2 * 256 * 32000);
  const int64_t weight_copies = 2 * m.product_weight_values() + m.layers * 3 * m.d_model * 4;
  EXPECT_EQ(m.product_weight_values(), 2 * (3 * 256 * 256 + 2 * 256 * 1024) + 256 * 256);
  for (int64_t c : {0, 16, 256}) {
    Plan mixed = Sliced(c);
    mixed.bf16_products = true;
    const Prediction plain = *Predict(w, Sliced(c), profile);
    const Prediction bf16 = *Predict(w, mixed, profile);
    const int64_t rows = c == 0 ? 4096 : c;
    EXPECT_EQ(SliceGraphBytes(m, rows, mixed, profile) - SliceGraphBytes(m, rows, Sliced(c), profile),
              Bf16ProductBytes(m, rows) + Bf16WeightGradientBytes(m, profile))
        << "C=" << c;
    if (c > 0) {  // the sweep's stretch of kSweepSlices slices: no weight gradients there
      EXPECT_EQ(SweepStretchBytes(m, 4096, mixed) - SweepStretchBytes(m, 4096, Sliced(c)),
                Bf16ProductBytes(m, std::min<int64_t>(performer::kSweepSlices * c, 4096)));
    }
    const int64_t largest =
        c == 0 ? SliceGraphBytes(m, rows, mixed, profile)
               : std::max(SliceGraphBytes(m, rows, mixed, profile), SweepStretchBytes(m, 4096, mixed));
    const int64_t largest_plain = c == 0 ? SliceGraphBytes(m, rows, Sliced(c), profile)
                                         : std::max(SliceGraphBytes(m, rows, Sliced(c), profile),
                                                    SweepStretchBytes(m, 4096, Sliced(c)));
    // ... no batched weight-gradient buffers (each bfloat16 product is rounded as it comes), and
    // bfloat16 copies of the weights instead of the float32 forward copies.
    EXPECT_EQ(bf16.working_bytes - plain.working_bytes,
              largest - largest_plain - BatchedWeightGradientBytes(m, Sliced(c), profile) + weight_copies -
                  m.forward_layout_values(/*copy_all=*/true) * 4)
        << "C=" << c;
    // Only the linear maps' products run at the faster rate: faster, not 0.4 of the time.
    EXPECT_LT(bf16.seconds, plain.seconds) << "C=" << c;
    EXPECT_GT(bf16.seconds, 0.4 * plain.seconds) << "C=" << c;
  }
  // A larger size penalty for bfloat16 products (a CPU's): small slices lose, long ones still gain.
  profile.bf16_half_rate_rows = 8 * profile.half_rate_rows;
  auto bf16_over_float32 = [&](int64_t c) {
    Plan mixed = Sliced(c);
    mixed.bf16_products = true;
    return Predict(w, mixed, profile)->seconds / Predict(w, Sliced(c), profile)->seconds;
  };
  EXPECT_GT(bf16_over_float32(16), 1.0);
  EXPECT_LT(bf16_over_float32(0), 1.0);
  EXPECT_GT(bf16_over_float32(16), bf16_over_float32(256));
  // Unmeasured (bf16_flops_per_second 0): the float32 constants, the same time.
  DeviceProfile unmeasured = Profile();
  Plan mixed64 = Sliced(64);
  mixed64.bf16_products = true;
  EXPECT_DOUBLE_EQ(Predict(w, mixed64, unmeasured)->seconds, Predict(w, Sliced(64), unmeasured)->seconds);
  // Replayed slices keep the bfloat16 scratch in the graphs' pool too.
  cuda.replays_slices = true;
  Plan mixed = Sliced(16);
  mixed.bf16_products = true;
  EXPECT_EQ(Predict(w, mixed, cuda)->graph_pool_bytes - Predict(w, Sliced(16), cuda)->graph_pool_bytes,
            Bf16ProductBytes(m, 16) + Bf16WeightGradientBytes(m, cuda) + Bf16ProductBytes(m, 48));
}

TEST(CostModelTest, MemoryFollowsTheSliceAndThePolicy) {
  const Workload w{ConfigA(), 4096};
  const int64_t front = FrontBytes(ConfigA(), performer::DType::kFloat32);
  const int64_t reverse64 = Predict(w, Sliced(64), Profile())->peak_bytes;
  EXPECT_LT(reverse64, Predict(w, Sliced(256), Profile())->peak_bytes);
  EXPECT_LT(Predict(w, Sliced(256), Profile())->peak_bytes, Predict(w, Sliced(0), Profile())->peak_bytes);
  // store keeps N − 1 fronts; resync every r-th; both subtracting policies up to
  // kMaxConditioningFronts more for precision, never more than store.
  const int64_t conditioning = performer::kMaxConditioningFronts;
  EXPECT_EQ(Predict(w, Sliced(64, FrontPolicy::kStore), Profile())->kept_bytes, 62 * front);
  Plan resync = Sliced(64, FrontPolicy::kResync);
  resync.resync_every = 8;
  EXPECT_EQ(Predict(w, resync, Profile())->kept_bytes, (7 + conditioning) * front);  // entering 8, 16, …, 56
  resync.resync_every = 1;
  EXPECT_EQ(Predict(w, resync, Profile())->kept_bytes, 62 * front);
  EXPECT_EQ(Predict(Workload{ConfigA(), 3 * 64}, Sliced(64), Profile())->kept_bytes, 1 * front);  // 3 slices
  // Each document start may force one kept front.
  Workload packed = w;
  packed.documents = 10;
  EXPECT_EQ(Predict(packed, Sliced(64), Profile())->kept_bytes, (9 + conditioning) * front);
}

TEST(CostModelTest, DpCountsTheProgramsForwards) {
  const Workload w{ConfigA(), 4096};
  Plan plan = Sliced(64, FrontPolicy::kDp);
  plan.slots = 4;
  absl::StatusOr<Prediction> p = Predict(w, plan, Profile());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->slice_forwards, *OptimalCost(ScheduleKind::kHsm, 64, 4, 0, 0));
  EXPECT_EQ(p->kept_bytes, 4 * FrontBytes(ConfigA(), performer::DType::kFloat32));
  EXPECT_GT(p->seconds, Predict(w, Sliced(64), Profile())->seconds);
}

TEST(CostModelTest, TimeGrowsAsSlicesShrink) {
  const Workload w{ConfigA(), 4096};
  double previous = Predict(w, Sliced(0), Profile())->seconds;
  for (int64_t c : {1024, 256, 64, 16, 4}) {
    const double t = Predict(w, Sliced(c), Profile())->seconds;
    EXPECT_GT(t, previous) << c;
    previous = t;
  }
}

TEST(CostModelTest, BadInputIsRejected) {
  EXPECT_EQ(Predict(Workload{ConfigA(), 100}, Sliced(200), Profile()).status().code(),
            absl::StatusCode::kInvalidArgument);
  Workload w{ConfigA(), 100};
  w.documents = 0;
  EXPECT_EQ(Predict(w, Sliced(10), Profile()).status().code(), absl::StatusCode::kInvalidArgument);
  DeviceProfile bad = Profile();
  bad.flops_per_second = 0;
  EXPECT_EQ(Predict(Workload{ConfigA(), 100}, Sliced(10), bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The linear maps' products, counted apart: q|k|v, the FFN and (with the output) the output map,
// 2·M·K·N FLOPs each; the rest is the prefix sums'. Only they take the bfloat16 constants.
TEST(CostModelTest, LinearProductsAreCountedApartAndOnlyTheyTakeTheBf16Constants) {
  const ModelConfig m = ConfigA();
  const double d = m.d_model, f = m.d_ff, vocab = m.vocab, layers = m.layers;
  const DeviceProfile float32 = Profile();
  DeviceProfile profile = float32;
  profile.bf16_flops_per_second = 4e11;
  profile.bf16_half_rate_rows = 100;
  profile.bf16_layer_overhead_s = 3e-4;
  for (int64_t tokens : {16, 4096}) {
    const double t = static_cast<double>(tokens);
    const MatmulCost with_output = SliceMatmulCost(m, tokens, PrefixMode::kChunked, 64, true);
    EXPECT_DOUBLE_EQ(with_output.linear_flops, 2 * t * (3 * d * d * layers + 2 * d * f * layers + d * vocab));
    const MatmulCost sweep = SliceMatmulCost(m, tokens, PrefixMode::kChunked, 64, false);
    EXPECT_DOUBLE_EQ(sweep.linear_flops, 2 * t * (3 * d * d * layers + 2 * d * f * (layers - 1)));
    EXPECT_GT(with_output.flops, with_output.linear_flops);  // the prefix sums' products
    EXPECT_GT(with_output.size_weighted_flops, with_output.linear_size_weighted_flops);

    // bfloat16 − float32 = the linear products at the two sets of constants, and the overheads.
    Plan mixed = Sliced(tokens);
    mixed.bf16_products = true;
    const double linear32 =
        (with_output.linear_flops + float32.half_rate_rows * with_output.linear_size_weighted_flops) / 1e11;
    const double linear16 = (with_output.linear_flops + 100 * with_output.linear_size_weighted_flops) / 4e11;
    const double expected = SliceSeconds(m, tokens, Sliced(tokens), true, profile) - linear32 + linear16 +
                            (3e-4 - float32.layer_overhead_s) * layers;
    EXPECT_NEAR(SliceSeconds(m, tokens, mixed, true, profile), expected, 1e-12 * expected);
  }
}

}  // namespace
}  // namespace slimfit::planner
