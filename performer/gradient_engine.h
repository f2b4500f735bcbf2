// The gradient engine: the exact gradient of a causal Performer LM on a packed token stream,
// either by ordinary back-propagation over the whole sequence (Plan::slice == 0, the reference) or
// by the sliced low-memory algorithm of the SLiM paper (Likhosherstov et al., Algorithms 1–2) for any
// slice size 1 ≤ C ≤ L:
//
//   forward sweep (no autograd graph): for n = 1..N run slice n from the front U(n−1), keep only
//     U(n) — plus, depending on the front policy, the fronts the backward sweep cannot recover;
//   backward sweep: for n = N..1 obtain U(n−1) (by subtraction, eq. 9, or from a kept front),
//     rebuild slice n with autograd from U(n−1) as a leaf, and back-propagate
//     Φ(n) = loss(n) + Σ_r ⟨G(n)_r, U(n)_r⟩, which accumulates ∇θ and yields G(n−1) = ∇U(n−1) Φ(n).
//
// Memory stays that of a length-C computation plus the parameters, their gradients and a few
// fronts; the loss and gradient equal the full ones up to rounding for every C. Documents restart
// the prefix state, so a slice containing a document start cannot be walked back by subtraction:
// its incoming front is kept during the forward sweep (one front per such slice).
//
// Example:
//   Plan plan; plan.slice = 256;
//   absl::StatusOr<GradientResult> result = ComputeGradient(model, batch, plan, {});
//
// Thread safety: ComputeGradient never modifies the model and may run concurrently on one model;
// peak memory is process-wide though (memory_tracker.h), and Plan::threads > 0 sets LibTorch's
// process-wide intra-op thread count.
#ifndef SLIMFIT_PERFORMER_GRADIENT_ENGINE_H_
#define SLIMFIT_PERFORMER_GRADIENT_ENGINE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "performer/checkpoint_schedule.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/plan.h"

namespace slimfit::performer {

// How the sliced algorithm launches slices that repeat a shape: a slice without a document start
// inside does the same device work whatever its values, so on a GPU each shape can be captured once
// as a CUDA graph and replayed (one launch instead of a few hundred LibTorch calls per slice).
enum class SliceReplay {
  kAuto,   // CUDA graphs on a CUDA device in builds that have them (scripts/cuda/), for calls of at
           // least 8 slices of at most 256 tokens (AutoReplaysSlices, slice_replay_rule.h: fewer do
           // not repay the captures; larger ones gain little for the scratch memory the graphs
           // keep); op by op elsewhere
  kOff,    // every slice op by op
  kRerun,  // the replay path without capture, on any device (tests of its buffer handling)
};

struct GradientOptions {
  // The loss is loss_sum / loss_normalizer; 0 means the batch's own predicted-token count. A
  // coordinator splitting one batch across workers passes the whole batch's count so shard
  // gradients add up to the batch gradient.
  int64_t loss_normalizer = 0;
  // FAVOR+ random features are drawn from this seed (SampleFavorProjections) once per call and
  // reused in every recomputation.
  uint64_t feature_seed = 0;
  // Explicit FAVOR+ projections, one [heads, head_dim, M] per layer, instead of the seed.
  std::vector<at::Tensor> favor_projections;
  // Plans with the dp front policy: the checkpoint schedule to run over `slices` slices under the
  // plan's kind, slots, α and β. The engine executes schedules but does not choose them; the
  // planner does (planner::ScheduleForPlan). The engine checks what it is given (SimulateSchedule)
  // before running it.
  std::function<absl::StatusOr<Schedule>(const Plan& plan, int64_t slices)> dp_schedule;
  SliceReplay slice_replay = SliceReplay::kAuto;
  // Where it applies (any device, float32/float64 with or without bfloat16 products, every feature
  // map, chunked prefix sums, no layer recomputation), run each slice's forward and backward as
  // hand-written tensor operations instead of through autograd: the same gradient to rounding, with
  // a fraction of the LibTorch calls (on a GPU, kernels) per slice. false: autograd everywhere (for
  // tests and benchmarks that compare the two).
  bool explicit_backprop = true;
};

struct GradientResult {
  std::vector<at::Tensor> gradients;  // ∇θ (loss_sum / normalizer), in model.names() order
  double loss_sum = 0;                // Σ cross-entropy over predicted tokens
  int64_t token_count = 0;            // predicted tokens in the batch
  int64_t normalizer = 0;             // what loss_sum was divided by
  // Tensor bytes at the call's high-water mark (parameters too). With replayed slices on CUDA, plus
  // graph_pool_bytes: the allocator counts a graph's scratch only while capturing it, but holds it
  // for the whole call (an upper bound, by at most what the capture had live at the peak).
  int64_t peak_bytes = 0;
  int64_t start_bytes = 0;         // tensor bytes allocated when the call began (parameters, ...)
  double seconds = 0;              // wall time of the call
  int64_t slice_forwards = 0;      // slice computations run (forward sweep + rebuilds)
  int64_t stored_fronts_peak = 0;  // most fronts held at once by the front policy
  // Fronts the subtracting policies (reverse, resync) kept because rebuilding them by subtraction
  // would have lost their precision (the sweep's conditioning, sliced_gradient.h), and those they
  // recomputed instead by a forward from an exact front (in slice_forwards) once
  // kMaxConditioningFronts were kept.
  int64_t conditioning_fronts = 0;
  int64_t conditioning_fronts_recomputed = 0;
  // The slice forwards (in slice_forwards) that conditioning cost beyond the policy's own 2N − 1:
  // stretches swept again slice by slice to place a keep exactly (their first sweep, and the stretch
  // swept after one before its check came back), and the recomputations.
  int64_t conditioning_forwards = 0;
  int64_t replayed_slices = 0;   // slice computations launched as a replay (SliceReplay)
  int64_t graph_pool_bytes = 0;  // device memory the captured graphs held for their scratch
  // Buffers of small CPU slices' weight gradients, added a batch at a time (BatchedWeightGradients).
  int64_t batched_weight_gradient_bytes = 0;
  // Why replays stopped during the call (a capture failed: then CUDA graphs stay off for the
  // process, and later calls say so here), or empty.
  std::string replay_fallback;
  // Whether the call ran its slices by hand (GradientOptions::explicit_backprop, where it applies).
  bool explicit_backprop = false;

  double loss() const { return token_count == 0 ? 0.0 : loss_sum / static_cast<double>(normalizer); }
};

// Errors: INVALID_ARGUMENT for a bad batch (empty, token outside the vocabulary, bad document
// starts), a bad plan (C ≤ 0 with slicing, C > L, …), a plan dtype other than the model's, bad
// FAVOR+ projections, or a dp schedule that does not fit the plan; FAILED_PRECONDITION for a dp
// plan without options.dp_schedule; the schedule function's own error; RESOURCE_EXHAUSTED when the device
// runs out of memory; INTERNAL for other LibTorch failures, with context.
absl::StatusOr<GradientResult> ComputeGradient(const PerformerModel& model, const PackedBatch& batch,
                                               const Plan& plan, const GradientOptions& options);

// How far one gradient is from another, taking all tensors as one vector:
// ‖got − want‖₂ / ‖want‖₂ over every element of every tensor, computed in float64 whatever the
// tensors' dtype and on want's device (got may be on another: a GPU's gradient against a CPU's).
// This is how the tests and //bench:gradient_bench compare a sliced gradient with the full one
// (GradientResult::gradients of both).
// REQUIRES: got.size() == want.size(), got[i] and want[i] of the same shape; a violation is a
// programming error and throws c10::Error. When want is all zeros the result is +inf (NaN if got
// is all zeros too).
double RelativeDiscrepancy(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_GRADIENT_ENGINE_H_
