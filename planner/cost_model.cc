#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "performer/batched_weight_gradient_rows.h"
#include "performer/slice_replay_rule.h"
#include "performer/sweep_stretch_rule.h"
#include "planner/bptt_schedule.h"

namespace slimfit::planner {

using performer::DType;
using performer::FeatureMap;
using performer::FrontPolicy;
using performer::LayerNormPlacement;
using performer::ModelConfig;
using performer::Plan;
using performer::PrefixMode;

double SavedElementsPerToken(const ModelConfig& c, PrefixMode mode, int64_t block) {
  const double d = static_cast<double>(c.d_model);
  const double f = static_cast<double>(c.d_ff);
  const double k = static_cast<double>(c.heads);
  const double m = static_cast<double>(c.features_per_head());
  const double hd = static_cast<double>(c.head_dim());
  // Per layer, counted from performer_model.cc and prefix_attention.cc:
  //   F: layer input x (d), q and k projections kept by the feature map (2d), φq and φk (2kM),
  //      v (d); pre-LN adds LN1's output (d) and statistics (2).
  //   G: numerator (d) and denominator (k) kept by the division, the re-laid-out attention (d)
  //      and its LayerNorm statistics, the residual sum (d), the FFN's two d_ff-wide activations
  //      (2f) and its output (d) with LayerNorm statistics.
  double layer = 4 * d + 2 * k * m + 4 * d + k + 2 * f + 4;
  if (c.layernorm == LayerNormPlacement::kPre) layer += d + 2;
  if (c.feature_map == FeatureMap::kFavor) layer += 2 * k * m;  // exp outputs next to φ
  if (mode == PrefixMode::kCumsum) {
    // Every prefix state R_l and Z_l is kept, and the outer products and the states' gradient
    // are alive next to them at the peak.
    layer += 3 * (k * m * hd + k * m);
  } else {
    // The chunked backward rebuilds one front per block: amortised over the block's tokens.
    layer +=
        k * m * (hd + 1) / static_cast<double>(std::max<int64_t>(block, 1)) + k * static_cast<double>(block);
  }
  // Output head: the selected rows, logits and log-probabilities.
  const double head = d + 2.0 * static_cast<double>(c.vocab);
  return static_cast<double>(c.layers) * layer + head;
}

int64_t FrontBytes(const ModelConfig& c, DType dtype) {
  return c.layers * c.front_elements_per_layer() * performer::DTypeBytes(dtype);
}

MatmulCost SliceMatmulCost(const ModelConfig& c, int64_t tokens, PrefixMode mode, int64_t block,
                           bool with_output) {
  MatmulCost cost;
  auto product = [&](double m, double k, double n, double count) {
    const double f = 2 * m * k * n * count;
    cost.flops += f;
    cost.size_weighted_flops += f * (1 / m + 1 / k + 1 / n);
  };
  // The linear maps' products (what Plan::bf16_products rounds), counted apart as well.
  auto linear_product = [&](double m, double k, double n, double count) {
    const MatmulCost before = cost;
    product(m, k, n, count);
    cost.linear_flops += cost.flops - before.flops;
    cost.linear_size_weighted_flops += cost.size_weighted_flops - before.size_weighted_flops;
  };
  const double s = static_cast<double>(tokens);
  const double d = static_cast<double>(c.d_model);
  const double f = static_cast<double>(c.d_ff);
  const double heads = static_cast<double>(c.heads);
  const double m = static_cast<double>(c.features_per_head());
  const double hd = static_cast<double>(c.head_dim());
  const double b = static_cast<double>(std::min<int64_t>(block, tokens));
  const double layers = static_cast<double>(c.layers);
  linear_product(s, d, d, 3 * layers);  // q, k, v
  if (c.feature_map == FeatureMap::kFavor) product(s, hd, m, 2 * heads * layers);
  if (mode == PrefixMode::kChunked) {
    const double blocks = heads * std::ceil(s / b) * layers;
    product(b, m, b, blocks);   // scores Q Kᵀ
    product(b, b, hd, blocks);  // scores · V
    product(b, m, hd, blocks);  // Q · R
    product(m, b, hd, blocks);  // front update Kᵀ V
  } else {
    // Outer products, prefix states and their reads are element-wise, memory-bound work: count it
    // as matrix products with a unit dimension so it runs at the element-wise speed.
    product(s, m, hd, 3 * heads * layers);
    product(s * m * hd, 1, 1, 3 * heads * layers);
  }
  const double ffn_layers = with_output ? layers : layers - 1;  // the forward sweep skips the last G
  linear_product(s, d, f, ffn_layers);
  linear_product(s, f, d, ffn_layers);
  if (with_output) linear_product(s, d, static_cast<double>(c.vocab), 1);
  return cost;
}

double SliceSeconds(const ModelConfig& c, int64_t tokens, const Plan& plan, bool with_output,
                    const DeviceProfile& p) {
  const MatmulCost cost = SliceMatmulCost(c, tokens, plan.prefix_mode, plan.block, with_output);
  const double elements =
      static_cast<double>(tokens) * SavedElementsPerToken(c, plan.prefix_mode, plan.block);
  // The linear maps' products at the products' own constants (bfloat16 where measured).
  const bool bf16 = plan.bf16_products && p.bf16_flops_per_second > 0;
  const double linear_rate = bf16 ? p.bf16_flops_per_second : p.flops_per_second;
  const double linear_half_rate_rows = bf16 ? p.bf16_half_rate_rows : p.half_rate_rows;
  const double layer_overhead_s = bf16 ? p.bf16_layer_overhead_s : p.layer_overhead_s;
  const double linear =
      (cost.linear_flops + linear_half_rate_rows * cost.linear_size_weighted_flops) / linear_rate;
  const double attention = (cost.flops - cost.linear_flops +
                            p.half_rate_rows * (cost.size_weighted_flops - cost.linear_size_weighted_flops)) /
                           p.flops_per_second;
  return linear + attention + p.seconds_per_element * elements +
         layer_overhead_s * static_cast<double>(c.layers);
}

int64_t Bf16ProductBytes(const ModelConfig& c, int64_t tokens) {
  const int64_t widest = std::max(c.d_ff, c.vocab);  // the FFN's or the output map's product
  return 2 * tokens * (c.d_model + widest);
}

int64_t Bf16WeightGradientBytes(const ModelConfig& c, const DeviceProfile& profile) {
  const int64_t d = c.d_model;
  const int64_t bytes_per_value = absl::StartsWith(profile.device, "cuda") ? 2 : 2 + 4;
  return bytes_per_value * std::max({3 * d * d, d * c.d_ff, d * c.vocab});
}

int64_t SliceGraphBytes(const ModelConfig& c, int64_t tokens, const Plan& plan,
                        const DeviceProfile& profile) {
  double per_token = SavedElementsPerToken(c, plan.prefix_mode, plan.block);
  if (plan.recompute == performer::LayerRecompute::kLayers) {
    // Each layer's input, the head's graph, and one layer rebuilt at a time during the backward.
    const double head = static_cast<double>(c.d_model) + 2.0 * static_cast<double>(c.vocab);
    const double layer = (per_token - head) / static_cast<double>(c.layers);
    per_token = static_cast<double>(c.layers * c.d_model) + head + layer;
  }
  const double elements = per_token * static_cast<double>(tokens);
  return static_cast<int64_t>(std::ceil(profile.activation_scale * elements *
                                        static_cast<double>(performer::DTypeBytes(plan.dtype)))) +
         profile.activation_overhead_bytes +
         (plan.bf16_products ? Bf16ProductBytes(c, tokens) + Bf16WeightGradientBytes(c, profile) : 0);
}

bool ForwardCopiesApply(const DeviceProfile& profile, DType dtype, bool bf16_products) {
  return dtype == DType::kFloat32 && !bf16_products && profile.forward_weight_copies &&
         !absl::StartsWith(profile.device, "cuda");
}

int64_t BatchedWeightGradientBytes(const ModelConfig& c, const Plan& plan, const DeviceProfile& profile) {
  return absl::StartsWith(profile.device, "cuda") ? 0 : performer::BatchedWeightGradientBytes(c, plan);
}

int64_t SweepStretchBytes(const ModelConfig& c, int64_t seq_len, const Plan& plan) {
  const int64_t sweep_tokens = std::min<int64_t>(SweepSlicesPerStretch(c, plan) * plan.slice, seq_len);
  // Measured here: a graph-free layer forward peaks at about 2·d_ff + 7·d_model values per token
  // (the FFN's hidden activation and its GELU, the fused q/k/v output, features, attention).
  return sweep_tokens * (2 * c.d_ff + 7 * c.d_model) * performer::DTypeBytes(plan.dtype) +
         (plan.bf16_products ? Bf16ProductBytes(c, sweep_tokens) : 0);
}

int64_t GraphPoolBytes(const ModelConfig& c, int64_t seq_len, const Plan& plan,
                       const DeviceProfile& profile) {
  if (plan.slice <= 0 || !profile.replays_slices || !absl::StartsWith(profile.device, "cuda")) return 0;
  if (!performer::AutoReplaysSlices((seq_len + plan.slice - 1) / plan.slice, plan.slice)) return 0;
  // resync replays backward steps of both kinds (from a kept front, by subtraction): two graphs.
  const int64_t step_graphs = plan.front_policy == FrontPolicy::kResync ? 2 : 1;
  return step_graphs * SliceGraphBytes(c, plan.slice, plan, profile) + SweepStretchBytes(c, seq_len, plan) +
         profile.graph_pool_overhead_bytes;
}

absl::Status CheckDocuments(int64_t documents, int64_t sequence_length, absl::string_view documents_field,
                            absl::string_view length_field) {
  if (documents >= 1 && documents <= sequence_length) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(documents_field, ": must be between 1 and ", length_field,
                                                 " (", sequence_length, "), got ", documents));
}

int64_t SweepSlicesPerStretch(const ModelConfig& c, const Plan& plan) {
  if (plan.front_policy == FrontPolicy::kStore || plan.front_policy == FrontPolicy::kDp ||
      c.feature_map == FeatureMap::kRelu) {
    return 1;
  }
  if (plan.front_policy == FrontPolicy::kResync) return std::min(performer::kSweepSlices, plan.resync_every);
  return performer::kSweepSlices;
}

absl::StatusOr<Prediction> Predict(const Workload& w, const Plan& plan, const DeviceProfile& profile) {
  int64_t dp_forwards = 0;
  if (plan.slice > 0 && plan.front_policy == FrontPolicy::kDp) {
    if (absl::Status s = plan.Validate(w.seq_len); !s.ok()) return s;
    const int64_t slices = (w.seq_len + plan.slice - 1) / plan.slice;
    absl::StatusOr<int64_t> cost = OptimalCost(plan.schedule, slices, plan.slots, plan.alpha, plan.beta);
    if (!cost.ok()) return cost.status();
    dp_forwards = *cost;
  }
  return PredictWithForwards(w, plan, profile, dp_forwards);
}

namespace {
// PredictWithForwards: the time of a plan without forward weight copies over the same plan with them.
constexpr double kOneWeightLayoutSlowdown = 1.15;
}  // namespace

absl::StatusOr<Prediction> PredictWithForwards(const Workload& w, const Plan& plan,
                                               const DeviceProfile& profile, int64_t dp_forwards) {
  if (absl::Status s = w.model.Validate(); !s.ok()) return s;
  if (absl::Status s = plan.Validate(w.seq_len); !s.ok()) return s;
  if (absl::Status s = profile.Validate(); !s.ok()) return s;
  if (absl::Status s = CheckDocuments(w.documents, w.seq_len, "workload.documents", "workload.seq_len");
      !s.ok()) {
    return s;
  }
  const ModelConfig& c = w.model;
  const int64_t dtype_bytes = performer::DTypeBytes(plan.dtype);
  Prediction p;
  p.parameter_bytes = c.parameter_count() * dtype_bytes;
  p.gradient_bytes = p.parameter_bytes * (w.gradient_sum ? 2 : 1);
  p.optimizer_bytes = c.parameter_count() * w.optimizer_bytes_per_parameter;
  const int64_t front = FrontBytes(c, plan.dtype);

  // The engine's copies of the weights for its forward products: q | k | v fused per layer and,
  // on a CPU in float32, where the products run in oneDNN, every other linear weight
  // (performer::CopiesForwardLayouts; a CUDA build of the worker keeps one layout on any device).
  // With bfloat16 products, a bfloat16 copy of every linear weight instead, and the fused biases
  // (performer::PrepareForwardLayouts).
  const bool copies_apply = ForwardCopiesApply(profile, plan.dtype, plan.bf16_products);
  const int64_t forward_layouts =
      plan.bf16_products ? 2 * c.product_weight_values() + c.layers * 3 * c.d_model * dtype_bytes
                         : c.forward_layout_values(copies_apply && plan.copy_forward_weights) * dtype_bytes;
  if (plan.slice == 0) {
    p.working_bytes = SliceGraphBytes(c, w.seq_len, plan, profile) + forward_layouts;
    p.seconds =
        SliceSeconds(c, w.seq_len, plan, /*with_output=*/true, profile) * (1.0 + profile.backward_factor);
    p.slice_forwards = 1;
  } else {
    const int64_t slices = (w.seq_len + plan.slice - 1) / plan.slice;
    const int64_t last = w.seq_len - (slices - 1) * plan.slice;
    // Slices that contain a document start keep their incoming front (sweep policies).
    const int64_t document_fronts = std::min(w.documents - 1, slices - 1);
    int64_t kept_fronts = document_fronts;
    int64_t kept_graphs = 0;
    int64_t forwards = 2 * slices - 1;  // the forward sweep stops before the last slice
    switch (plan.front_policy) {
      case FrontPolicy::kReverse:
        break;
      case FrontPolicy::kStore:
        kept_fronts = std::max<int64_t>(slices - 2, 0);  // entering slices 1..N−2; N−1's is the cursor
        break;
      case FrontPolicy::kResync:
        kept_fronts =
            std::min(std::max<int64_t>(slices - 2, 0), (slices - 2) / plan.resync_every + document_fronts);
        break;
      case FrontPolicy::kDp:
        forwards = dp_forwards;
        kept_fronts = plan.schedule == ScheduleKind::kIsm ? 0 : plan.slots;  // MSM: units of one front
        kept_graphs = plan.schedule == ScheduleKind::kIsm ? plan.slots : 0;
        break;
    }
    // The subtracting policies may keep up to kMaxConditioningFronts more where a front rebuilt by
    // subtraction would lose its precision (performer/sliced_gradient.h): counted as kept.
    if (plan.front_policy == FrontPolicy::kReverse || plan.front_policy == FrontPolicy::kResync) {
      kept_fronts =
          std::min(std::max<int64_t>(slices - 2, 0), kept_fronts + performer::kMaxConditioningFronts);
    }
    const int64_t graph = SliceGraphBytes(c, plan.slice, plan, profile);
    p.kept_bytes = kept_fronts * front + kept_graphs * (graph + front);
    // The forward sweep (a stretch of slices, no graph) and the backward sweep (one slice graph) do
    // not overlap: the larger of the two counts. Fronts in flight: the backward sweep's U(n), G(n),
    // U(n−1) and G(n−1); the forward sweep's stretch entry and exit, and the entry of the stretch
    // before, held until its check is read (performer/sliced_gradient.cc).
    p.working_bytes = std::max(graph, SweepStretchBytes(c, w.seq_len, plan)) + 4 * front + forward_layouts +
                      BatchedWeightGradientBytes(c, plan, profile);
    p.graph_pool_bytes = GraphPoolBytes(c, w.seq_len, plan, profile);
    p.slice_forwards = forwards;
    const int64_t per_stretch = SweepSlicesPerStretch(c, plan);

    // Time: `slices` graph builds and backwards, the rest forwards without a graph.
    auto phase_seconds = [&](int64_t tokens, bool with_output) {
      return SliceSeconds(c, tokens, plan, with_output, profile);
    };
    const double build = (slices - 1) * phase_seconds(plan.slice, true) + phase_seconds(last, true);
    const int64_t advances = forwards - slices;
    // The sweep policies advance several slices per stretch; dp's schedule slice by slice.
    const double advance_one = phase_seconds(std::min<int64_t>(per_stretch * plan.slice, w.seq_len), false) /
                               static_cast<double>(per_stretch);
    // Layer recomputation runs every graph build's forward twice: once keeping layer inputs, once
    // layer by layer with autograd during the backward.
    const double build_passes =
        1.0 + profile.backward_factor + (plan.recompute == performer::LayerRecompute::kLayers ? 1.0 : 0.0);
    p.seconds = build * build_passes + static_cast<double>(advances) * advance_one;
  }
  // Without the forward copies, oneDNN takes the FFN and output weights transposed: measured on
  // config A on the 2-core reference machine, 1.14× the time with them at C = 64 and C = 16 and
  // 1.02× at full length (BENCHMARKS.md, "What is each engine choice worth on a CPU?"). One
  // factor for all plans: it decides only between plans that fit, where the sliced ones dominate.
  if (copies_apply && !plan.copy_forward_weights) p.seconds *= kOneWeightLayoutSlowdown;
  p.resident_bytes = profile.resident_overhead_bytes;
  p.peak_bytes = p.parameter_bytes + p.gradient_bytes + p.optimizer_bytes + p.kept_bytes + p.working_bytes +
                 p.resident_bytes + p.graph_pool_bytes;
  return p;
}

}  // namespace slimfit::planner
