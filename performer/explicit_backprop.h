// Internal to //performer:gradient_engine: a stretch's forward pass and its gradient written out
// by hand — every derivative of the layer (performer_model.h) as explicit tensor operations, with
// no autograd graph.
//
// Why: at the row counts of small slices the time of a slice is not its arithmetic but the calls
// around it. Autograd records a node per operation, keeps its view bookkeeping, and runs its
// engine per slice; at C = 16 on the reference machine a slice's forward and backward were ~470
// LibTorch calls (BENCHMARKS.md, "What is each engine choice worth on a CPU?"). Written out, a
// layer's forward is a few dozen calls and its backward a few dozen more: the same products
// (matrix_products.h), the row-wise
// pieces in float32 loops below 512 rows (layer_kernels_cpu.h) and LibTorch's own kernels and
// derivative kernels otherwise, the chunked prefix sums' forward and backward (prefix_attention.h),
// and results written into the gradient sinks in place (the LayerNorms' too).
//
// The results equal autograd's to rounding (a few sums run in another order); the engine's tests
// compare the two paths in float64 for every configuration this path serves.
//
// Served: any device (on a GPU the same calls are fewer kernels per slice than autograd's, and
// slices replay as CUDA graphs the same way; the row kernels are the CPU's, LibTorch's kernels run
// elsewhere), float32 and float64, bfloat16 products (the same rounded products as autograd's
// linear maps: ModelWeights::products), every feature map (FAVOR+'s through LibTorch's kernels, the
// others' through the row kernels on a CPU), pre- and post-LN, the chunked prefix mode, no layer
// recomputation. Everything else (the cumsum reference mode, layer recomputation) keeps the
// autograd path.
//
// Thread safety: as SliceRunner (one thread; reads the Context it is given).
#ifndef SLIMFIT_PERFORMER_EXPLICIT_BACKPROP_H_
#define SLIMFIT_PERFORMER_EXPLICIT_BACKPROP_H_

#include <ATen/ATen.h>

#include <vector>

#include "performer/plan.h"
#include "performer/slice_runner.h"

namespace slimfit::performer::internal {

// Whether the hand-written path serves this engine call (see above); `wanted` is
// GradientOptions::explicit_backprop.
bool ExplicitBackpropApplies(bool wanted, const Context& ctx, LayerRecompute recompute);

// What one layer's backward needs from its forward.
struct LayerTape {
  at::Tensor x;                          // the layer's input [S, d] (the residual)
  at::Tensor h, h_mean, h_rstd;          // pre-LN: LN1(x) and its statistics; post-LN: h = x
  at::Tensor qkv;                        // [S, 3d] before the feature map
  at::Tensor phi;                        // [2, k, S, M]: φq | φk
  at::Tensor v;                          // [k, S, d]
  Front entry;                           // the incoming front
  at::Tensor denominator_eps;            // den + ε [k, S]
  at::Tensor attention;                  // [S, d] = num / (den + ε), heads joined
  at::Tensor a_mean, a_rstd;             // post-LN: LN1 statistics of `attention`
  at::Tensor x1;                         // x + the attention branch
  at::Tensor ffn_input, f_mean, f_rstd;  // pre-LN: LN2(x1) and its statistics; post-LN: x1
  at::Tensor u, hidden;                  // [S, d_ff] before and after GELU
  at::Tensor o, o_mean, o_rstd;          // post-LN: the FFN output and LN2 statistics
};

// A stretch's tape: every layer's, the loss's.
struct SliceTape {
  std::vector<LayerTape> layers;
  at::Tensor top_rows;      // the last layer's output at the predicted rows [P, d]
  at::Tensor log_probs;     // [P, vocab]
  at::Tensor total_weight;  // nll_loss's
  bool has_loss = false;
};

// REQUIRES for both: ExplicitBackpropApplies(true, ctx, ...).
//
// Runs every layer over `stretch` from the fronts `entry_for_layer` supplies and sets `exit` to
// the outgoing fronts. With `tape`, records what ExplicitBackward needs and returns the loss sum
// (a scalar); without, runs only what the fronts need (no last G, no logits) and returns an
// undefined tensor.
at::Tensor ExplicitForward(const Context& ctx, const Stretch& stretch, const Front& zero,
                           const EntryFn& entry_for_layer, ModelFront* exit, SliceTape* tape);

// Back-propagates loss·loss_scale + ⟨exit_grad, exit⟩ through a recorded stretch, adding every
// parameter's gradient into the Context's gradient sinks, and releases the tape as it goes.
// Returns the gradient of each layer's incoming front when `reads_entry` (empty otherwise).
// `exit_grad` may be empty (no gradient reaches the outgoing fronts).
ModelFront ExplicitBackward(const Context& ctx, const Stretch& stretch, const Front& zero, SliceTape& tape,
                            const at::Tensor& loss_scale, const ModelFront& exit_grad, bool reads_entry);

}  // namespace slimfit::performer::internal

#endif  // SLIMFIT_PERFORMER_EXPLICIT_BACKPROP_H_
