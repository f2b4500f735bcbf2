// Internal to //performer:gradient_engine: the pieces both sliced drivers (sliced_gradient.h) are
// made of — lay out a stretch of the token stream, run it without a graph, build one slice's
// autograd graph from its incoming front, back-propagate a built graph (with or without layer
// recomputation). Nothing here validates its input: ComputeGradient has.
//
// Thread safety: a SliceRunner is used by one thread; it reads the Context and batch it was given,
// which must outlive it.
#ifndef SLIMFIT_PERFORMER_SLICE_RUNNER_H_
#define SLIMFIT_PERFORMER_SLICE_RUNNER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "performer/batched_weight_gradients.h"
#include "performer/model_config.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/plan.h"
#include "performer/prefix_attention.h"

namespace slimfit::performer::internal {

using ModelFront = std::vector<Front>;  // one per layer

// Everything one stretch [begin, end) of the stream needs, on the model's device. Segments are
// relative to the stretch.
struct Stretch {
  StretchLayout layout;
  at::Tensor tokens, positions, target_rows, targets;
  at::Tensor all;  // the one buffer the four above are views of: tokens | positions | target rows | targets
};

Stretch MakeStretch(const PackedBatch& batch, int64_t begin, int64_t end, const at::Device& device);

// Points tokens, positions, target_rows and targets at their parts of s->all (rows, rows,
// predicted, predicted values).
void BindStretchViews(Stretch* s, int64_t rows, int64_t predicted);

// What the engine needs for every stretch it runs.
struct Context {
  const ModelConfig& config;
  ModelWeights weights;  // bound to the call's leaf parameters
  std::vector<at::Tensor> projections;
  PrefixMode mode;
  int64_t block;
  // Where the hand-written backward adds its weight gradients several slices at a time (small CPU
  // slices; flushed by the caller before the sinks are read); null: straight into the sinks.
  BatchedWeightGradients* weight_gradients = nullptr;
};

// Supplies layer r's incoming front once that layer's F outputs are known (the reverse policy
// subtracts the slice's own φk ⊗ v this way).
using EntryFn = std::function<Front(int64_t r, const AttentionInputs& in)>;

// Runs layer r over one stretch: F, the prefix sums from the front `entry_for_layer` supplies, and
// (when `need_output`) G. Sets *exit to the outgoing front; returns the layer's output or, without
// `need_output`, an undefined tensor.
at::Tensor RunLayer(const Context& ctx, int64_t r, const Stretch& stretch, const at::Tensor& x,
                    const EntryFn& entry_for_layer, Front* exit, bool need_output);

// Runs every layer over one stretch. Fills `exit` with each layer's outgoing front and returns the
// last layer's output, or an undefined tensor when `need_output` is false (the forward sweep needs
// only fronts, so it skips the last G and the logits).
at::Tensor RunStretch(const Context& ctx, const Stretch& stretch, const EntryFn& entry_for_layer,
                      ModelFront* exit, bool need_output);

// U(n−1) = U(n) − Σ_{l in slice n} φk_l ⊗ v_l (Likhosherstov et al., eq. 9): the front entering a
// stretch without document starts, from the front `after` it and the stretch's own F outputs.
// Records no autograd graph.
Front FrontBefore(const Front& after, const AttentionInputs& in);

struct SliceTape;  // explicit_backprop.h

class SliceRunner {
 public:
  // A slice's autograd graph, from its incoming front (leaves) to its loss and outgoing front.
  struct Graph {
    int64_t slice = 0;
    at::Tensor loss;                       // Σ cross-entropy of the slice's predictions
    ModelFront exit;                       // outgoing front, part of the graph
    ModelFront entry;                      // incoming front values (detached)
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
    // The hand-written path (explicit_backprop.h): the forward's tape instead of an autograd
    // graph; `stretch` and `reads_entry` are set too.
    std::shared_ptr<SliceTape> tape;
  };

  // `leaves` are the parameters gradients flow to; `normalizer` divides every slice's loss;
  // `explicit_backprop`: run slices by hand where explicit_backprop.h applies.
  SliceRunner(const Context& ctx, const PackedBatch& batch, int64_t slice, LayerRecompute recompute,
              const std::vector<at::Tensor>& leaves, const at::Device& device,
              const at::TensorOptions& options, int64_t normalizer, bool explicit_backprop);

  int64_t slices() const { return (batch_.size() + slice_ - 1) / slice_; }
  const Front& zero() const { return zero_; }
  ModelFront ZeroModelFront() const { return ModelFront(ctx_.config.layers, zero_); }
  Stretch StretchOf(int64_t n) const { return StretchOfSlices(n, n + 1); }
  // Slices [first, end) as one stretch.
  Stretch StretchOfSlices(int64_t first, int64_t end) const;
  // Whether slice n's incoming front can be recovered from its outgoing one by subtraction (no
  // document starts inside it).
  bool Reversible(int64_t n) const;
  int64_t forwards() const { return forwards_; }
  // Whether slices run the hand-written forward and backward (explicit_backprop.h) instead of
  // autograd.
  bool explicit_backprop() const { return explicit_; }
  // For replayed slices (slice_graphs.h): host code, and with it Build's and Advance's count, runs
  // only when a slice is captured.
  void set_forwards(int64_t forwards) { forwards_ = forwards; }
  // Σ of the back-propagated slices' loss sums, in float64 (one read from the device, at the end).
  double loss_sum() const;

  // Runs `stretch` (one slice, or `slices_covered` consecutive slices) from `entry` without an
  // autograd graph; returns its outgoing front.
  ModelFront Advance(const Stretch& stretch, const ModelFront& entry, int64_t slices_covered = 1);

  // Builds slice n's graph; `entry_for_layer` supplies each layer's incoming front value.
  Graph Build(int64_t n, const Stretch& stretch, const EntryFn& entry_for_layer);

  // Back-propagates loss/normaliser + ⟨exit_grad, exit⟩ through `graph` (releasing it); parameter
  // gradients accumulate, and the gradient of the incoming front is returned (empty: zero).
  ModelFront Backpropagate(Graph& graph, const ModelFront& exit_grad);

 private:
  Graph BuildExplicit(int64_t n, const Stretch& stretch, const EntryFn& entry_for_layer);
  Graph BuildRecomputed(int64_t n, const Stretch& stretch, const EntryFn& entry_for_layer);
  ModelFront BackpropagateRecomputed(Graph& graph, const ModelFront& exit_grad);
  // Adds a slice's loss on the device, in place (a replayed slice adds into the same tensor):
  // reading it per slice (.item()) would stall a GPU's queue.
  void AddLoss(const at::Tensor& loss);

  const Context& ctx_;
  const PackedBatch& batch_;
  const int64_t slice_;
  const LayerRecompute recompute_;
  const bool explicit_;
  const std::vector<at::Tensor>& leaves_;
  const at::Device device_;
  const Front zero_;
  const at::Tensor loss_scale_;
  int64_t forwards_ = 0;
  at::Tensor loss_sum_;  // float64 scalar on the device
};

}  // namespace slimfit::performer::internal

#endif  // SLIMFIT_PERFORMER_SLICE_RUNNER_H_
