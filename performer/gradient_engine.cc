#include "performer/gradient_engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "performer/cpu_runtime.h"
#include "performer/memory_tracker.h"
#include "performer/prefix_attention.h"
#include "planner/bptt_schedule.h"

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
  const int64_t rows = end - begin;
  const int64_t predicted = static_cast<int64_t>(s.layout.targets.size());
  // One host buffer and one copy to the device: tokens | positions | target rows | targets.
  std::vector<int64_t> host;
  host.reserve(2 * rows + 2 * predicted);
  host.insert(host.end(), batch.tokens.begin() + begin, batch.tokens.begin() + end);
  host.insert(host.end(), s.layout.positions.begin(), s.layout.positions.end());
  host.insert(host.end(), s.layout.target_rows.begin(), s.layout.target_rows.end());
  host.insert(host.end(), s.layout.targets.begin(), s.layout.targets.end());
  const at::Tensor all = LongTensor(host.data(), static_cast<int64_t>(host.size()), device);
  s.tokens = all.narrow(0, 0, rows);
  s.positions = all.narrow(0, rows, rows);
  s.target_rows = all.narrow(0, 2 * rows, predicted);
  s.targets = all.narrow(0, 2 * rows + predicted, predicted);
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
// Runs layer r over one stretch: F, the prefix sums from the front `entry_for_layer` supplies
// once F's outputs are known, and (when `need_output`) G. Sets *exit to the outgoing front.
template <typename EntryFn>
at::Tensor RunLayer(const Context& ctx, int64_t r, const Stretch& stretch, const at::Tensor& x,
                    EntryFn&& entry_for_layer, Front* exit, bool need_output) {
  const LayerWeights& w = ctx.weights.layers[r];
  const at::Tensor projection = ctx.projections.empty() ? at::Tensor() : ctx.projections[r];
  AttentionInputs in = LayerF(ctx.config, w, x, projection);
  const Front entry = entry_for_layer(r, in);
  PrefixAttentionResult prefix =
      CausalPrefixAttention(in.phi_q, in.phi_k, in.v, entry, stretch.layout.segments, ctx.mode, ctx.block);
  *exit = std::move(prefix.end);
  if (!need_output) return at::Tensor();
  return LayerG(ctx.config, w, prefix.numerator, prefix.denominator, in.residual);
}

template <typename EntryFn>
at::Tensor RunStretch(const Context& ctx, const Stretch& stretch, EntryFn&& entry_for_layer,
                      ModelFront* exit, bool need_output) {
  at::Tensor x = EmbedTokens(ctx.config, ctx.weights, stretch.tokens, stretch.positions);
  exit->resize(ctx.config.layers);
  for (int64_t r = 0; r < ctx.config.layers; ++r) {
    const bool last = r + 1 == ctx.config.layers;
    x = RunLayer(ctx, r, stretch, x, entry_for_layer, &(*exit)[r], need_output || !last);
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

// The pieces both sliced drivers are made of: run a slice without a graph, build a slice's
// autograd graph from its incoming front, back-propagate a built graph.
class SliceRunner {
 public:
  // A slice's autograd graph, from its incoming front (leaves) to its loss and outgoing front.
  struct Graph {
    int64_t slice = 0;
    at::Tensor loss;                   // Σ cross-entropy of the slice's predictions
    ModelFront exit;                   // outgoing front, part of the graph
    ModelFront entry;                  // incoming front values (detached)
    std::vector<at::Tensor> entry_leaves;  // [num_0, den_0, num_1, ...] when the slice reads its front
    // Layer recomputation: only each layer's input is kept (detached); the layers are rebuilt one
    // at a time during Backpropagate. `embedded` is x0 with its (embedding-only) graph, `top` the
    // last layer's output as a leaf under the loss's graph.
    bool recomputed = false;
    Stretch stretch;
    at::Tensor embedded;
    std::vector<at::Tensor> layer_inputs;
    at::Tensor top;
    bool reads_entry = false;
  };

  SliceRunner(const Context& ctx, const PackedBatch& batch, int64_t slice, LayerRecompute recompute,
              const std::vector<at::Tensor>& leaves, const at::Device& device, const at::TensorOptions& options,
              int64_t normalizer)
      : ctx_(ctx),
        batch_(batch),
        slice_(slice),
        recompute_(recompute),
        leaves_(leaves),
        device_(device),
        zero_(ZeroFront(ctx.config.heads, ctx.config.features_per_head(), ctx.config.head_dim(), options)),
        loss_scale_(at::full({}, 1.0 / static_cast<double>(normalizer), options)) {}

  int64_t slices() const { return (batch_.size() + slice_ - 1) / slice_; }
  const Front& zero() const { return zero_; }
  ModelFront ZeroModelFront() const { return ModelFront(ctx_.config.layers, zero_); }
  Stretch StretchOf(int64_t n) const {
    return MakeStretch(batch_, n * slice_, std::min(batch_.size(), (n + 1) * slice_), device_);
  }
  int64_t forwards() const { return forwards_; }
  double loss_sum() const { return loss_sum_; }

  // Runs slice n from `entry` without an autograd graph; returns its outgoing front.
  // Runs `stretch` (one slice, or `slices_covered` consecutive slices) from `entry` without an
  // autograd graph; returns its outgoing front.
  ModelFront Advance(const Stretch& stretch, const ModelFront& entry, int64_t slices_covered = 1) {
    at::NoGradGuard no_grad;
    ModelFront exit;
    RunStretch(ctx_, stretch, [&](int64_t r, const AttentionInputs&) { return entry[r]; }, &exit,
               /*need_output=*/false);
    forwards_ += slices_covered;
    return exit;
  }
  Stretch StretchOfSlices(int64_t first, int64_t end) const {
    return MakeStretch(batch_, first * slice_, std::min(batch_.size(), end * slice_), device_);
  }
  bool Reversible(int64_t n) const {
    return StretchIsReversible(batch_, n * slice_, std::min(batch_.size(), (n + 1) * slice_));
  }

  // Builds slice n's graph; `entry_for_layer(r, F outputs)` supplies each layer's incoming front
  // value once that layer's F has run (the reverse policy subtracts the slice's own φk ⊗ v).
  template <typename EntryFn>
  Graph Build(int64_t n, const Stretch& stretch, EntryFn&& entry_for_layer) {
    if (recompute_ == LayerRecompute::kLayers) return BuildRecomputed(n, stretch, entry_for_layer);
    Graph graph;
    graph.slice = n;
    graph.entry.resize(ctx_.config.layers);
    const bool reads_entry = n > 0 && stretch.layout.segments.front().continues_front;
    auto entry = [&](int64_t r, const AttentionInputs& in) -> Front {
      const Front value = entry_for_layer(r, in);
      graph.entry[r] = value;
      if (!reads_entry) return value;
      Front leaf{value.numerator.detach().requires_grad_(true), value.denominator.detach().requires_grad_(true)};
      graph.entry_leaves.push_back(leaf.numerator);
      graph.entry_leaves.push_back(leaf.denominator);
      return leaf;
    };
    const at::Tensor x = RunStretch(ctx_, stretch, entry, &graph.exit, /*need_output=*/true);
    graph.loss = CrossEntropySum(ctx_.weights, x, stretch.target_rows, stretch.targets);
    ++forwards_;
    return graph;
  }

  // Back-propagates loss/normaliser + ⟨exit_grad, exit⟩ through `graph` (releasing it); parameter
  // gradients accumulate, and the gradient of the incoming front is returned (empty: zero).
  ModelFront Backpropagate(Graph& graph, const ModelFront& exit_grad) {
    if (graph.recomputed) return BackpropagateRecomputed(graph, exit_grad);
    // A slice whose rows all end documents predicts nothing: only its fronts carry gradient.
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> output_grads;
    if (graph.loss.requires_grad()) {
      outputs.push_back(graph.loss);
      output_grads.push_back(loss_scale_);
    }
    for (size_t r = 0; r < exit_grad.size(); ++r) {
      outputs.push_back(graph.exit[r].numerator);
      output_grads.push_back(exit_grad[r].numerator);
      outputs.push_back(graph.exit[r].denominator);
      output_grads.push_back(exit_grad[r].denominator);
    }
    std::vector<at::Tensor> inputs = leaves_;
    inputs.insert(inputs.end(), graph.entry_leaves.begin(), graph.entry_leaves.end());
    if (!outputs.empty()) {
      torch::autograd::backward(outputs, output_grads, /*retain_graph=*/false, /*create_graph=*/false, inputs);
    }
    loss_sum_ += graph.loss.item<double>();
    ModelFront entry_grad;
    for (size_t i = 0; i + 1 < graph.entry_leaves.size(); i += 2) {
      const at::Tensor& gn = graph.entry_leaves[i].grad();
      const at::Tensor& gd = graph.entry_leaves[i + 1].grad();
      entry_grad.push_back(Front{gn.defined() ? gn : at::zeros_like(zero_.numerator),
                                 gd.defined() ? gd : at::zeros_like(zero_.denominator)});
    }
    graph = Graph();
    return entry_grad;
  }

 private:
  // Layer recomputation (seed 003 at layer granularity): the forward keeps each layer's input and
  // the loss's graph over the last layer's output; Backpropagate rebuilds layer r with autograd
  // from its input and incoming front, back-propagates it, and moves on to layer r − 1.
  template <typename EntryFn>
  Graph BuildRecomputed(int64_t n, const Stretch& stretch, EntryFn&& entry_for_layer) {
    Graph graph;
    graph.slice = n;
    graph.recomputed = true;
    graph.stretch = stretch;
    graph.reads_entry = n > 0 && stretch.layout.segments.front().continues_front;
    graph.entry.resize(ctx_.config.layers);
    graph.exit.resize(ctx_.config.layers);
    graph.embedded = EmbedTokens(ctx_.config, ctx_.weights, stretch.tokens, stretch.positions);
    at::Tensor x;
    {
      at::NoGradGuard no_grad;
      x = graph.embedded.detach();
      for (int64_t r = 0; r < ctx_.config.layers; ++r) {
        graph.layer_inputs.push_back(x);
        auto entry = [&](int64_t layer, const AttentionInputs& in) {
          graph.entry[layer] = entry_for_layer(layer, in);
          return graph.entry[layer];
        };
        x = RunLayer(ctx_, r, stretch, x, entry, &graph.exit[r], /*need_output=*/true);
      }
    }
    graph.top = x.detach().requires_grad_(true);
    graph.loss = CrossEntropySum(ctx_.weights, graph.top, stretch.target_rows, stretch.targets);
    ++forwards_;
    return graph;
  }

  ModelFront BackpropagateRecomputed(Graph& graph, const ModelFront& exit_grad) {
    const ModelConfig& c = ctx_.config;
    std::vector<at::Tensor> inputs = leaves_;
    inputs.push_back(graph.top);
    if (graph.loss.requires_grad()) {
      torch::autograd::backward({graph.loss}, {loss_scale_}, /*retain_graph=*/false, /*create_graph=*/false, inputs);
    }
    loss_sum_ += graph.loss.item<double>();
    at::Tensor g = graph.top.grad().defined() ? graph.top.grad() : at::zeros_like(graph.top);
    ModelFront entry_grad(graph.reads_entry ? c.layers : 0);
    for (int64_t r = c.layers - 1; r >= 0; --r) {
      const at::Tensor x = graph.layer_inputs[r].detach().requires_grad_(true);
      std::vector<at::Tensor> entry_leaves;
      auto entry = [&](int64_t layer, const AttentionInputs&) -> Front {
        if (!graph.reads_entry) return graph.entry[layer];
        Front leaf{graph.entry[layer].numerator.detach().requires_grad_(true),
                   graph.entry[layer].denominator.detach().requires_grad_(true)};
        entry_leaves = {leaf.numerator, leaf.denominator};
        return leaf;
      };
      Front exit;
      const at::Tensor out = RunLayer(ctx_, r, graph.stretch, x, entry, &exit, /*need_output=*/true);
      std::vector<at::Tensor> outputs = {out};
      std::vector<at::Tensor> grads = {g};
      if (!exit_grad.empty()) {
        outputs.insert(outputs.end(), {exit.numerator, exit.denominator});
        grads.insert(grads.end(), {exit_grad[r].numerator, exit_grad[r].denominator});
      }
      std::vector<at::Tensor> layer_inputs = leaves_;
      layer_inputs.push_back(x);
      layer_inputs.insert(layer_inputs.end(), entry_leaves.begin(), entry_leaves.end());
      torch::autograd::backward(outputs, grads, /*retain_graph=*/false, /*create_graph=*/false, layer_inputs);
      g = x.grad().defined() ? x.grad() : at::zeros_like(x);
      if (graph.reads_entry) {
        const at::Tensor& gn = entry_leaves[0].grad();
        const at::Tensor& gd = entry_leaves[1].grad();
        entry_grad[r] = Front{gn.defined() ? gn : at::zeros_like(zero_.numerator),
                              gd.defined() ? gd : at::zeros_like(zero_.denominator)};
      }
      graph.layer_inputs[r] = at::Tensor();
    }
    torch::autograd::backward({graph.embedded}, {g}, /*retain_graph=*/false, /*create_graph=*/false, leaves_);
    graph = Graph();
    return entry_grad;
  }

  const Context& ctx_;
  const PackedBatch& batch_;
  const int64_t slice_;
  const LayerRecompute recompute_;
  const std::vector<at::Tensor>& leaves_;
  const at::Device device_;
  const Front zero_;
  const at::Tensor loss_scale_;
  int64_t forwards_ = 0;
  double loss_sum_ = 0;
};

// Seed 000's Algorithms 1–2: a forward sweep keeping fronts, then a backward sweep that obtains
// each U(n−1) by subtraction (reverse), from a kept front (store, resync) — and from a kept front
// wherever a document starts, under every policy.
void SweepGradient(SliceRunner& runner, const Plan& plan, const ModelConfig& c, int64_t* stored_fronts_peak) {
  const int64_t slices = runner.slices();
  // Features are non-negative, so a denominator component that is exactly zero stays zero until
  // some token of the document switches it on; relu features do this all the time. Subtraction
  // would turn such an exact zero into rounding noise, and noise over a zero denominator is not
  // small (num / (den + 1e-16)). So the forward sweep records, per layer and component, the slice
  // in which it first became non-zero within the current document ("onset"), and the backward
  // sweep restores those exact zeros. Costs one [k, M] integer tensor per layer.
  // Only relu produces exact zeros in practice (elu+1 and FAVOR+ features are positive, x² is zero
  // only for an exactly zero projection), so only relu pays for the bookkeeping.
  const bool track_onset = c.feature_map == FeatureMap::kRelu;
  const int64_t never = slices;
  const at::TensorOptions long_options = runner.zero().denominator.options().dtype(at::kLong);
  std::vector<at::Tensor> onset(c.layers, at::full({c.heads, c.features_per_head()}, never, long_options));
  struct Kept {
    ModelFront fronts;
    std::vector<at::Tensor> onset;
  };
  // Fronts entering slices, kept by the front policy or because a document starts in the slice.
  std::map<int64_t, Kept> kept;
  // The forward sweep stops before the last slice: the backward sweep starts by rebuilding slice
  // N from U(N−1), which the sweep ends with, so U(N) itself is never needed.
  //
  // Where no front inside it is needed, the sweep runs several slices as one stretch: the same
  // arithmetic in fewer, larger matrix products. A graph-free forward holds about a third of what
  // a slice graph holds per token, so kSweepSlices slices cost about the memory of one slice's
  // graph. Relu's onset bookkeeping needs every slice boundary, so it sweeps slice by slice.
  constexpr int64_t kSweepSlices = 3;
  auto keep = [&](int64_t n) {
    return n > 0 && n + 1 < slices &&
           (plan.front_policy == FrontPolicy::kStore || !runner.Reversible(n) ||
            (plan.front_policy == FrontPolicy::kResync && n % plan.resync_every == 0));
  };
  ModelFront front = runner.ZeroModelFront();
  int64_t n = 0;
  while (n + 1 < slices) {
    if (keep(n)) kept.emplace(n, Kept{front, onset});
    *stored_fronts_peak = std::max<int64_t>(*stored_fronts_peak, kept.size());
    int64_t end = n + 1;
    if (!track_onset) {
      while (end < slices - 1 && end - n < kSweepSlices && !keep(end)) ++end;
    }
    const Stretch stretch = runner.StretchOfSlices(n, end);
    front = runner.Advance(stretch, front, end - n);
    if (track_onset) {
      at::NoGradGuard no_grad;
      for (int64_t r = 0; r < c.layers; ++r) {
        const at::Tensor on = front[r].denominator > 0;
        const at::Tensor first_time = stretch.layout.reversible ? on & (onset[r] == never) : on;
        onset[r] = at::where(first_time, at::full({}, n, long_options),
                             stretch.layout.reversible ? onset[r] : at::full({}, never, long_options));
      }
    }
    n = end;
  }

  // `front` is now U(N−1), the last slice's incoming front; walk back. `exit_grad` is G(n) for the
  // slice being rebuilt, and `front` the front leaving it.
  ModelFront exit_grad;  // empty: zero
  for (int64_t n = slices - 1; n >= 0; --n) {
    const Stretch stretch = runner.StretchOf(n);
    auto kept_it = kept.find(n);
    SliceRunner::Graph graph = runner.Build(n, stretch, [&](int64_t r, const AttentionInputs& in) -> Front {
      if (n == 0) return runner.zero();
      if (kept_it != kept.end()) return kept_it->second.fronts[r];
      if (n + 1 == slices) return front[r];
      // U(n−1) = U(n) − Σ_{l in slice n} φk_l ⊗ v_l (seed 000, eq. 9), with the components that
      // switched on in slice n or later restored to exact zeros.
      at::NoGradGuard no_grad;
      const Front added = FrontContribution(in.phi_k.detach(), in.v.detach());
      Front value{front[r].numerator - added.numerator, front[r].denominator - added.denominator};
      if (track_onset) {
        const at::Tensor off = onset[r] >= n;
        value.numerator.masked_fill_(off.unsqueeze(2), 0);
        value.denominator.masked_fill_(off, 0);
      }
      return value;
    });
    front = graph.entry;  // U(n) is no longer needed: release it before back-propagating
    exit_grad = runner.Backpropagate(graph, exit_grad);
    if (kept_it != kept.end()) {
      onset = std::move(kept_it->second.onset);
      kept.erase(kept_it);
    }
  }
}

// The dp front policy: executes an optimal schedule of seed 002 (planner/bptt_schedule.h) action
// by action. Fronts are never recovered by subtraction, so the result is exact whatever N.
absl::Status ScheduledGradient(SliceRunner& runner, const Plan& plan, int64_t* stored_fronts_peak) {
  const int64_t slices = runner.slices();
  absl::StatusOr<planner::Schedule> schedule =
      planner::MakeSchedule(plan.schedule, slices, plan.slots, plan.alpha, plan.beta);
  if (!schedule.ok()) {
    return absl::Status(schedule.status().code(),
                        absl::StrCat("dp schedule for ", slices, " slices: ", schedule.status().message()));
  }
  std::optional<ModelFront> cursor = runner.ZeroModelFront();
  int64_t cursor_position = 0;
  std::map<int64_t, ModelFront> kept_fronts;
  std::map<int64_t, SliceRunner::Graph> kept_graphs;
  ModelFront exit_grad;  // G of the next slice to back-propagate
  auto broken = [&](const planner::ScheduleAction& action, absl::string_view why) {
    return absl::InternalError(absl::StrCat("dp schedule action ", planner::ScheduleActionToString(action),
                                            " cannot run: ", why));
  };
  auto detached = [](const ModelFront& fronts) {
    ModelFront copy;
    for (const Front& f : fronts) copy.push_back(Front{f.numerator.detach(), f.denominator.detach()});
    return copy;
  };
  for (const planner::ScheduleAction& action : schedule->actions) {
    const int64_t i = action.index;
    using Type = planner::ScheduleAction::Type;
    switch (action.type) {
      case Type::kForward:
        if (!cursor || cursor_position != i) return broken(action, "the cursor is not at the slice's front");
        cursor = runner.Advance(runner.StretchOf(i), *cursor);
        cursor_position = i + 1;
        break;
      case Type::kForwardKeepGraph:
      case Type::kForwardBackward: {
        if (!cursor || cursor_position != i) return broken(action, "the cursor is not at the slice's front");
        const ModelFront entry = *cursor;
        SliceRunner::Graph graph =
            runner.Build(i, runner.StretchOf(i), [&](int64_t r, const AttentionInputs&) { return entry[r]; });
        if (action.type == Type::kForwardBackward) {
          cursor.reset();
          exit_grad = runner.Backpropagate(graph, exit_grad);
        } else {
          cursor = detached(graph.exit);
          cursor_position = i + 1;
          kept_graphs.emplace(i, std::move(graph));
        }
        break;
      }
      case Type::kBackward: {
        auto it = kept_graphs.find(i);
        if (it == kept_graphs.end()) return broken(action, "the slice's graph was not kept");
        cursor.reset();
        exit_grad = runner.Backpropagate(it->second, exit_grad);
        kept_graphs.erase(it);
        break;
      }
      case Type::kKeepFront:
        if (!cursor || cursor_position != i) return broken(action, "the cursor is not at that front");
        kept_fronts[i] = *cursor;
        break;
      case Type::kFreeFront:
        kept_fronts.erase(i);
        break;
      case Type::kRestore: {
        if (auto it = kept_fronts.find(i); it != kept_fronts.end()) {
          cursor = it->second;
        } else if (auto graph = kept_graphs.find(i - 1); graph != kept_graphs.end()) {
          cursor = detached(graph->second.exit);
        } else if (auto graph_at = kept_graphs.find(i); graph_at != kept_graphs.end()) {
          cursor = graph_at->second.entry;
        } else if (i == 0) {
          cursor = runner.ZeroModelFront();
        } else {
          return broken(action, "that front is neither kept nor held by a kept graph");
        }
        cursor_position = i;
        break;
      }
    }
    *stored_fronts_peak = std::max<int64_t>(*stored_fronts_peak, kept_fronts.size() + kept_graphs.size());
  }
  if (!kept_graphs.empty() || !kept_fronts.empty()) {
    return absl::InternalError("dp schedule ended with kept fronts or graphs");
  }
  return absl::OkStatus();
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
    // q, k and v run as one matrix product per layer (FuseAttentionProjections); their gradient
    // buffers are views of one fused buffer per layer, so no per-parameter copy is needed.
    std::vector<at::Tensor> sink_tensors(leaves.size());
    std::vector<at::Tensor> fused_weight_sinks, fused_bias_sinks;
    for (int64_t r = 0; r < config.layers; ++r) {
      fused_weight_sinks.push_back(at::zeros({config.d_model, 3 * config.d_model}, tensor_options));
      fused_bias_sinks.push_back(at::zeros({3 * config.d_model}, tensor_options));
      const size_t first = FirstAttentionParameter(r);  // q weight, q bias, k weight, k bias, v weight, v bias
      for (int64_t j = 0; j < 3; ++j) {
        sink_tensors[first + 2 * j] = fused_weight_sinks[r].narrow(1, j * config.d_model, config.d_model);
        sink_tensors[first + 2 * j + 1] = fused_bias_sinks[r].narrow(0, j * config.d_model, config.d_model);
      }
    }
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!sink_tensors[i].defined()) sink_tensors[i] = at::zeros(leaves[i].sizes(), leaves[i].options());
    }
    ModelWeights sink = BindWeights(config, sink_tensors);
    for (int64_t r = 0; r < config.layers; ++r) {
      sink.layers[r].qkv_weight_t = fused_weight_sinks[r];
      sink.layers[r].qkv_bias = fused_bias_sinks[r];
    }
    Context ctx{config, BindWeights(config, leaves),
                options.favor_projections.empty()
                    ? SampleFavorProjections(config, options.feature_seed, tensor_options)
                    : options.favor_projections,
                plan.prefix_mode, plan.block};
    for (at::Tensor& projection : ctx.projections) projection = projection.to(tensor_options);
    FuseAttentionProjections(&ctx.weights);
    ctx.weights.gradient_sink = &sink;
    for (size_t r = 0; r < ctx.weights.layers.size(); ++r) ctx.weights.layers[r].gradient_sink = &sink.layers[r];

    if (token_count == 0) {
      // Nothing is predicted (every document is one token long): the loss and its gradient are 0.
      result.loss_sum = 0;
    } else if (plan.slice == 0) {
      result.loss_sum = FullGradient(ctx, batch, device, tensor_options, normalizer, &result.slice_forwards);
    } else {
      SliceRunner runner(ctx, batch, plan.slice, plan.recompute, leaves, device, tensor_options, normalizer);
      if (plan.front_policy == FrontPolicy::kDp) {
        if (absl::Status s = ScheduledGradient(runner, plan, &result.stored_fronts_peak); !s.ok()) return s;
      } else {
        SweepGradient(runner, plan, config, &result.stored_fronts_peak);
      }
      result.loss_sum = runner.loss_sum();
      result.slice_forwards = runner.forwards();
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

double RelativeDiscrepancy(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  TORCH_CHECK(got.size() == want.size(), "RelativeDiscrepancy: ", got.size(), " tensors against ",
              want.size());
  double difference_squared = 0;
  double want_squared = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    TORCH_CHECK(got[i].sizes() == want[i].sizes(), "RelativeDiscrepancy: tensor ", i, " has shape ",
                got[i].sizes(), " against ", want[i].sizes());
    const at::Tensor w = want[i].to(at::kDouble);
    difference_squared += (got[i].to(at::kDouble) - w).pow(2).sum().item<double>();
    want_squared += w.pow(2).sum().item<double>();
  }
  return std::sqrt(difference_squared) / std::sqrt(want_squared);
}

}  // namespace slimfit::performer
