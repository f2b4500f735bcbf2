#include "performer/slice_runner.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <utility>

#include "performer/explicit_backprop.h"

namespace slimfit::performer::internal {
namespace {

// On CUDA the host side is pinned and the copy asynchronous: a copy from pageable memory would
// wait for every kernel queued before it, once per slice. LibTorch's pinned-memory allocator keeps
// the buffer until the copy has run.
at::Tensor LongTensor(const int64_t* data, int64_t n, const at::Device& device) {
  const at::Tensor host = at::from_blob(const_cast<int64_t*>(data), {n}, at::kLong);
  if (!device.is_cuda()) return host.to(device, /*non_blocking=*/false, /*copy=*/true);
  at::Tensor pinned = at::empty({n}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  pinned.copy_(host);
  return pinned.to(device, /*non_blocking=*/true, /*copy=*/true);
}

}  // namespace

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
  s.all = LongTensor(host.data(), static_cast<int64_t>(host.size()), device);
  BindStretchViews(&s, rows, predicted);
  // Segments are relative to the stretch from here on.
  for (Segment& segment : s.layout.segments) {
    segment.begin -= begin;
    segment.end -= begin;
  }
  return s;
}

void BindStretchViews(Stretch* s, int64_t rows, int64_t predicted) {
  s->tokens = s->all.narrow(0, 0, rows);
  s->positions = s->all.narrow(0, rows, rows);
  s->target_rows = s->all.narrow(0, 2 * rows, predicted);
  s->targets = s->all.narrow(0, 2 * rows + predicted, predicted);
}

at::Tensor RunLayer(const Context& ctx, int64_t r, const Stretch& stretch, const at::Tensor& x,
                    const EntryFn& entry_for_layer, Front* exit, bool need_output) {
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

at::Tensor RunStretch(const Context& ctx, const Stretch& stretch, const EntryFn& entry_for_layer,
                      ModelFront* exit, bool need_output) {
  at::Tensor x = EmbedTokens(ctx.config, ctx.weights, stretch.tokens, stretch.positions);
  exit->resize(ctx.config.layers);
  for (int64_t r = 0; r < ctx.config.layers; ++r) {
    const bool last = r + 1 == ctx.config.layers;
    x = RunLayer(ctx, r, stretch, x, entry_for_layer, &(*exit)[r], need_output || !last);
  }
  return x;
}

Front FrontBefore(const Front& after, const AttentionInputs& in) {
  at::NoGradGuard no_grad;
  return FrontWithout(after, in.phi_k.detach(), in.v.detach());
}

SliceRunner::SliceRunner(const Context& ctx, const PackedBatch& batch, int64_t slice,
                         LayerRecompute recompute, const std::vector<at::Tensor>& leaves,
                         const at::Device& device, const at::TensorOptions& options, int64_t normalizer,
                         bool explicit_backprop)
    : ctx_(ctx),
      batch_(batch),
      slice_(slice),
      recompute_(recompute),
      explicit_(ExplicitBackpropApplies(explicit_backprop, ctx, recompute)),
      leaves_(leaves),
      device_(device),
      zero_(ZeroFront(ctx.config.heads, ctx.config.features_per_head(), ctx.config.head_dim(), options)),
      loss_scale_(at::full({}, 1.0 / static_cast<double>(normalizer), options)),
      loss_sum_(at::zeros({}, options.dtype(at::kDouble))) {}

Stretch SliceRunner::StretchOfSlices(int64_t first, int64_t end) const {
  return MakeStretch(batch_, first * slice_, std::min(batch_.size(), end * slice_), device_);
}

bool SliceRunner::Reversible(int64_t n) const {
  return StretchIsReversible(batch_, n * slice_, std::min(batch_.size(), (n + 1) * slice_));
}

ModelFront SliceRunner::Advance(const Stretch& stretch, const ModelFront& entry, int64_t slices_covered) {
  at::NoGradGuard no_grad;
  ModelFront exit;
  const EntryFn entry_for_layer = [&](int64_t r, const AttentionInputs&) { return entry[r]; };
  if (explicit_) {
    ExplicitForward(ctx_, stretch, zero_, entry_for_layer, &exit, /*tape=*/nullptr);
  } else {
    RunStretch(ctx_, stretch, entry_for_layer, &exit, /*need_output=*/false);
  }
  forwards_ += slices_covered;
  return exit;
}

SliceRunner::Graph SliceRunner::Build(int64_t n, const Stretch& stretch, const EntryFn& entry_for_layer) {
  if (recompute_ == LayerRecompute::kLayers) return BuildRecomputed(n, stretch, entry_for_layer);
  if (explicit_) return BuildExplicit(n, stretch, entry_for_layer);
  Graph graph;
  graph.slice = n;
  graph.entry.resize(ctx_.config.layers);
  const bool reads_entry = n > 0 && stretch.layout.segments.front().continues_front;
  auto entry = [&](int64_t r, const AttentionInputs& in) -> Front {
    const Front value = entry_for_layer(r, in);
    graph.entry[r] = value;
    if (!reads_entry) return value;
    Front leaf{value.numerator.detach().requires_grad_(true),
               value.denominator.detach().requires_grad_(true)};
    graph.entry_leaves.push_back(leaf.numerator);
    graph.entry_leaves.push_back(leaf.denominator);
    return leaf;
  };
  const at::Tensor x = RunStretch(ctx_, stretch, entry, &graph.exit, /*need_output=*/true);
  graph.loss = CrossEntropySum(ctx_.weights, x, stretch.target_rows, stretch.targets);
  ++forwards_;
  return graph;
}

ModelFront SliceRunner::Backpropagate(Graph& graph, const ModelFront& exit_grad) {
  if (graph.recomputed) return BackpropagateRecomputed(graph, exit_grad);
  if (graph.tape != nullptr) {
    ModelFront entry_grad =
        ExplicitBackward(ctx_, graph.stretch, zero_, *graph.tape, loss_scale_, exit_grad, graph.reads_entry);
    AddLoss(graph.loss);
    graph = Graph();
    return entry_grad;
  }
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
  AddLoss(graph.loss);
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

SliceRunner::Graph SliceRunner::BuildExplicit(int64_t n, const Stretch& stretch,
                                              const EntryFn& entry_for_layer) {
  Graph graph;
  graph.slice = n;
  graph.stretch = stretch;
  graph.reads_entry = n > 0 && stretch.layout.segments.front().continues_front;
  graph.entry.resize(ctx_.config.layers);
  graph.tape = std::make_shared<SliceTape>();
  graph.loss = ExplicitForward(
      ctx_, stretch, zero_,
      [&](int64_t r, const AttentionInputs& in) {
        graph.entry[r] = entry_for_layer(r, in);
        return graph.entry[r];
      },
      &graph.exit, graph.tape.get());
  ++forwards_;
  return graph;
}

// Layer recomputation (the activation-checkpointing trade at layer granularity): the forward keeps
// each layer's input and the loss's graph over the last layer's output; Backpropagate rebuilds layer
// r with autograd from its input and incoming front, back-propagates it, and moves on to layer r − 1.
SliceRunner::Graph SliceRunner::BuildRecomputed(int64_t n, const Stretch& stretch,
                                                const EntryFn& entry_for_layer) {
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

ModelFront SliceRunner::BackpropagateRecomputed(Graph& graph, const ModelFront& exit_grad) {
  const ModelConfig& c = ctx_.config;
  std::vector<at::Tensor> inputs = leaves_;
  inputs.push_back(graph.top);
  if (graph.loss.requires_grad()) {
    torch::autograd::backward({graph.loss}, {loss_scale_}, /*retain_graph=*/false, /*create_graph=*/false,
                              inputs);
  }
  AddLoss(graph.loss);
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

void SliceRunner::AddLoss(const at::Tensor& loss) { loss_sum_.add_(loss.detach().to(at::kDouble)); }

double SliceRunner::loss_sum() const { return loss_sum_.item<double>(); }

}  // namespace slimfit::performer::internal
