#include "performer/gradient_engine.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "performer/cpu_runtime.h"
#include "performer/memory_tracker.h"
#include "performer/prefix_attention.h"

namespace slimfit::performer {
namespace {

using ModelFront = std::vector<Front>;  // one per layer

// Everything one stretch [begin, end) of the stream needs, on the model's device.
struct Stretch {
  StretchLayout layout;
  at::Tensor tokens, positions, target_rows, targets;
};

at::Tensor LongTensor(const int64_t* data, int64_t n, const at::Device& device) {
  return at::from_blob(const_cast<int64_t*>(data), {n}, at::kLong).to(device, /*non_blocking=*/false, /*copy=*/true);
}

Stretch MakeStretch(const PackedBatch& batch, int64_t begin, int64_t end, const at::Device& device) {
  Stretch s;
  s.layout = LayoutStretch(batch, begin, end);
  s.tokens = LongTensor(batch.tokens.data() + begin, end - begin, device);
  s.positions = LongTensor(s.layout.positions.data(), end - begin, device);
  const int64_t predicted = static_cast<int64_t>(s.layout.targets.size());
  s.target_rows = LongTensor(s.layout.target_rows.data(), predicted, device);
  s.targets = LongTensor(s.layout.targets.data(), predicted, device);
  // Segments are relative to the stretch from here on.
  for (Segment& segment : s.layout.segments) {
    segment.begin -= begin;
    segment.end -= begin;
  }
  return s;
}

// What the engine needs for every stretch it runs.
struct Context {
  const ModelConfig& config;
  ModelWeights weights;  // bound to the call's leaf parameters
  std::vector<at::Tensor> projections;
  PrefixMode mode;
  int64_t block;
};

// Runs the layers over one stretch from `entry` (one front per layer). `entry_for_layer`, when
// set, supplies each layer's incoming front once that layer's F outputs are known (the backward
// sweep recovers fronts by subtraction this way). Fills `exit` with each layer's outgoing front and
// returns the last layer's output, or an undefined tensor when `need_output` is false (the forward
// sweep needs only fronts, so it skips the last G and the logits).
template <typename EntryFn>
at::Tensor RunStretch(const Context& ctx, const Stretch& stretch, EntryFn&& entry_for_layer,
                      ModelFront* exit, bool need_output) {
  at::Tensor x = EmbedTokens(ctx.config, ctx.weights, stretch.tokens, stretch.positions);
  exit->resize(ctx.config.layers);
  for (int64_t r = 0; r < ctx.config.layers; ++r) {
    const LayerWeights& w = ctx.weights.layers[r];
    const at::Tensor projection = ctx.projections.empty() ? at::Tensor() : ctx.projections[r];
    AttentionInputs in = LayerF(ctx.config, w, x, projection);
    const Front entry = entry_for_layer(r, in);
    PrefixAttentionResult prefix = CausalPrefixAttention(in.phi_q, in.phi_k, in.v, entry,
                                                         stretch.layout.segments, ctx.mode, ctx.block);
    (*exit)[r] = std::move(prefix.end);
    if (r + 1 == ctx.config.layers && !need_output) return at::Tensor();
    x = LayerG(ctx.config, w, prefix.numerator, prefix.denominator, in.residual);
  }
  return x;
}

absl::Status ValidateProjections(const ModelConfig& config, const std::vector<at::Tensor>& projections) {
  if (projections.empty()) return absl::OkStatus();
  if (config.feature_map != FeatureMap::kFavor) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FAVOR+ projections were given for a model with the ", FeatureMapName(config.feature_map),
        " feature map"));
  }
  if (static_cast<int64_t>(projections.size()) != config.layers) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", config.layers,
                                                   " FAVOR+ projections (one per layer), got ",
                                                   projections.size()));
  }
  const std::vector<int64_t> shape = {config.heads, config.head_dim(), config.features_per_head()};
  for (size_t r = 0; r < projections.size(); ++r) {
    if (!projections[r].defined() || projections[r].sizes() != at::IntArrayRef(shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FAVOR+ projection of layer ", r, " must have shape [", shape[0], ", ", shape[1], ", ",
          shape[2], "]"));
    }
  }
  return absl::OkStatus();
}

// Ordinary back-propagation over the whole stream: the reference gradient.
double FullGradient(const Context& ctx, const PackedBatch& batch, const at::Device& device,
                    const at::TensorOptions& options, int64_t normalizer, int64_t* slice_forwards) {
  const Stretch stretch = MakeStretch(batch, 0, batch.size(), device);
  const ModelConfig& c = ctx.config;
  const Front zero = ZeroFront(c.heads, c.features_per_head(), c.head_dim(), options);
  ModelFront exit;
  const at::Tensor x = RunStretch(ctx, stretch, [&](int64_t, const AttentionInputs&) { return zero; },
                                  &exit, /*need_output=*/true);
  const at::Tensor loss = CrossEntropySum(ctx.weights, x, stretch.target_rows, stretch.targets);
  torch::autograd::backward({loss}, {at::full({}, 1.0 / static_cast<double>(normalizer), options)});
  *slice_forwards = 1;
  return loss.item<double>();
}

// The sliced algorithm (seed 000, Algorithms 1–2) with the plan's front policy.
double SlicedGradient(const Context& ctx, const PackedBatch& batch, const Plan& plan,
                      const std::vector<at::Tensor>& leaves, const at::Device& device,
                      const at::TensorOptions& options, int64_t normalizer,
                      int64_t* slice_forwards, int64_t* stored_fronts_peak) {
  const ModelConfig& c = ctx.config;
  const int64_t length = batch.size();
  const int64_t slice = plan.slice;
  const int64_t slices = (length + slice - 1) / slice;
  auto bounds = [&](int64_t n) { return std::make_pair(n * slice, std::min(length, (n + 1) * slice)); };
  const Front zero = ZeroFront(c.heads, c.features_per_head(), c.head_dim(), options);

  // Features are non-negative, so a denominator component that is exactly zero stays zero until
  // some token of the document switches it on; relu features do this all the time. Subtraction
  // would turn such an exact zero into rounding noise, and noise over a zero denominator is not
  // small (num / (den + 1e-16)). So the forward sweep records, per layer and component, the slice
  // in which it first became non-zero within the current document ("onset"), and the backward
  // sweep restores those exact zeros. Costs one [k, M] integer tensor per layer.
  const int64_t never = slices;
  std::vector<at::Tensor> onset(c.layers, at::full({c.heads, c.features_per_head()}, never,
                                                   options.dtype(at::kLong)));
  struct Kept {
    ModelFront fronts;
    std::vector<at::Tensor> onset;
  };
  // Fronts entering slices, kept by the front policy or because a document starts in the slice.
  std::map<int64_t, Kept> kept;
  ModelFront front(c.layers, zero);
  {
    at::NoGradGuard no_grad;
    for (int64_t n = 0; n < slices; ++n) {
      const auto [begin, end] = bounds(n);
      const Stretch stretch = MakeStretch(batch, begin, end, device);
      const bool keep = n > 0 && (plan.front_policy == FrontPolicy::kStore || !stretch.layout.reversible ||
                                  (plan.front_policy == FrontPolicy::kResync && n % plan.resync_every == 0));
      if (keep) kept.emplace(n, Kept{front, onset});
      *stored_fronts_peak = std::max<int64_t>(*stored_fronts_peak, kept.size());
      ModelFront exit;
      RunStretch(ctx, stretch, [&](int64_t r, const AttentionInputs&) { return front[r]; }, &exit,
                 /*need_output=*/false);
      for (int64_t r = 0; r < c.layers; ++r) {
        const at::Tensor on = exit[r].denominator > 0;
        const at::Tensor first_time = stretch.layout.reversible ? on & (onset[r] == never) : on;
        onset[r] = at::where(first_time, at::full({}, n, onset[r].options()),
                             stretch.layout.reversible ? onset[r] : at::full({}, never, onset[r].options()));
      }
      front = std::move(exit);
      ++*slice_forwards;
    }
  }

  // `front` is now U(N); walk back. `exit_grad` is G(n) for the slice being rebuilt.
  double loss_sum = 0;
  ModelFront exit_grad;  // empty: zero
  const at::Tensor loss_scale = at::full({}, 1.0 / static_cast<double>(normalizer), options);
  for (int64_t n = slices - 1; n >= 0; --n) {
    const auto [begin, end] = bounds(n);
    const Stretch stretch = MakeStretch(batch, begin, end, device);
    auto kept_it = kept.find(n);
    const bool uses_entry = n > 0 && stretch.layout.segments.front().continues_front;
    ModelFront entry_values(c.layers);
    std::vector<at::Tensor> entry_leaves;
    auto entry_for_layer = [&](int64_t r, const AttentionInputs& in) -> Front {
      Front value;
      if (n == 0) {
        value = zero;
      } else if (kept_it != kept.end()) {
        value = kept_it->second.fronts[r];
      } else {
        // U(n−1) = U(n) − Σ_{l in slice n} φk_l ⊗ v_l (seed 000, eq. 9), with the components that
        // switched on in slice n or later restored to exact zeros.
        at::NoGradGuard no_grad;
        const Front added = FrontContribution(in.phi_k.detach(), in.v.detach());
        const at::Tensor off = onset[r] >= n;
        value = Front{(front[r].numerator - added.numerator).masked_fill_(off.unsqueeze(2), 0),
                      (front[r].denominator - added.denominator).masked_fill_(off, 0)};
      }
      entry_values[r] = value;
      if (!uses_entry) return value;
      Front leaf{value.numerator.detach().requires_grad_(true), value.denominator.detach().requires_grad_(true)};
      entry_leaves.push_back(leaf.numerator);
      entry_leaves.push_back(leaf.denominator);
      return leaf;
    };
    ModelFront exit;
    const at::Tensor x = RunStretch(ctx, stretch, entry_for_layer, &exit, /*need_output=*/true);
    ++*slice_forwards;
    front = std::move(entry_values);  // U(n) is no longer needed: release it before back-propagating
    const at::Tensor loss = CrossEntropySum(ctx.weights, x, stretch.target_rows, stretch.targets);

    // A slice whose rows all end documents predicts nothing: only its fronts carry gradient.
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> output_grads;
    if (loss.requires_grad()) {
      outputs.push_back(loss);
      output_grads.push_back(loss_scale);
    }
    for (size_t r = 0; r < exit_grad.size(); ++r) {
      outputs.push_back(exit[r].numerator);
      output_grads.push_back(exit_grad[r].numerator);
      outputs.push_back(exit[r].denominator);
      output_grads.push_back(exit_grad[r].denominator);
    }
    std::vector<at::Tensor> inputs = leaves;
    inputs.insert(inputs.end(), entry_leaves.begin(), entry_leaves.end());
    if (!outputs.empty()) {
      torch::autograd::backward(outputs, output_grads, /*retain_graph=*/false, /*create_graph=*/false, inputs);
    }
    loss_sum += loss.item<double>();

    exit_grad.clear();
    if (uses_entry) {
      for (int64_t r = 0; r < c.layers; ++r) {
        const at::Tensor& gn = entry_leaves[2 * r].grad();
        const at::Tensor& gd = entry_leaves[2 * r + 1].grad();
        exit_grad.push_back(Front{gn.defined() ? gn : at::zeros_like(zero.numerator),
                                  gd.defined() ? gd : at::zeros_like(zero.denominator)});
      }
    }
    if (kept_it != kept.end()) {
      onset = std::move(kept_it->second.onset);
      kept.erase(kept_it);
    }
  }
  return loss_sum;
}

}  // namespace

absl::StatusOr<GradientResult> ComputeGradient(const PerformerModel& model, const PackedBatch& batch,
                                               const Plan& plan, const GradientOptions& options) {
  const ModelConfig& config = model.config();
  if (absl::Status s = ValidatePackedBatch(batch, config.vocab); !s.ok()) return s;
  if (absl::Status s = plan.Validate(batch.size()); !s.ok()) return s;
  if (plan.dtype != model.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("plan dtype ", DTypeName(plan.dtype),
                                                   " differs from the model's ", DTypeName(model.dtype())));
  }
  if (absl::Status s = ValidateProjections(config, options.favor_projections); !s.ok()) return s;
  const int64_t token_count = PredictedTokenCount(batch);
  const int64_t normalizer = options.loss_normalizer > 0 ? options.loss_normalizer : std::max<int64_t>(token_count, 1);

  const absl::Time start = absl::Now();
  const at::Device device = model.device();
  MemoryScope memory(device);
  absl::StatusOr<MemoryStats> start_memory = GetMemoryStats(device);
  GradientResult result;
  result.token_count = token_count;
  result.normalizer = normalizer;
  try {
    if (plan.threads > 0 && device.is_cpu()) {
      if (absl::Status s = ConfigureCpuThreads(plan.threads); !s.ok()) return s;
    }
    at::AutoGradMode enable_grad(true);
    const at::TensorOptions tensor_options = model.parameters().front().options();

    // Leaves sharing the model's storage, in compute layout: gradients accumulate in their .grad
    // and the model is untouched.
    std::vector<at::Tensor> leaves;
    for (const at::Tensor& p : ToComputeLayout(model.names(), model.parameters())) {
      leaves.push_back(p.detach().requires_grad_(true));
    }
    // The linear maps and the embedding add their gradients straight into these buffers (see
    // LayerWeights::gradient_sink): no temporary weight gradient per slice, no extra pass to add it.
    std::vector<at::Tensor> sink_tensors;
    for (const at::Tensor& leaf : leaves) sink_tensors.push_back(at::zeros(leaf.sizes(), leaf.options()));
    const ModelWeights sink = BindWeights(config, sink_tensors);
    Context ctx{config, BindWeights(config, leaves),
                options.favor_projections.empty()
                    ? SampleFavorProjections(config, options.feature_seed, tensor_options)
                    : options.favor_projections,
                plan.prefix_mode, plan.block};
    for (at::Tensor& projection : ctx.projections) projection = projection.to(tensor_options);
    ctx.weights.gradient_sink = &sink;
    for (size_t r = 0; r < ctx.weights.layers.size(); ++r) ctx.weights.layers[r].gradient_sink = &sink.layers[r];

    if (plan.slice == 0) {
      result.loss_sum = FullGradient(ctx, batch, device, tensor_options, normalizer, &result.slice_forwards);
    } else {
      result.loss_sum = SlicedGradient(ctx, batch, plan, leaves, device, tensor_options, normalizer,
                                       &result.slice_forwards, &result.stored_fronts_peak);
    }
    // Parameters without a sink (the LayerNorms) accumulated in .grad as usual.
    for (size_t i = 0; i < leaves.size(); ++i) {
      at::Tensor grad = sink_tensors[i];
      if (leaves[i].grad().defined()) grad.add_(leaves[i].grad());
      result.gradients.push_back(IsLinearWeight(model.names()[i]) ? grad.t() : grad);
    }
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    if (absl::StrContains(what, "can't allocate memory") || absl::StrContains(what, "out of memory")) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of memory computing a gradient with plan {", plan.DebugString(), "}: ", what));
    }
    return absl::InternalError(
        absl::StrCat("gradient with plan {", plan.DebugString(), "} failed: ", what));
  }
  absl::StatusOr<int64_t> peak = memory.PeakBytes();
  result.peak_bytes = peak.ok() ? *peak : -1;
  result.start_bytes = start_memory.ok() ? start_memory->current_bytes : -1;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

}  // namespace slimfit::performer
