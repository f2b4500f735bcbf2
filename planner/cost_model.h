// The planner's cost model: predicted peak memory and wall time of one gradient call of the
// engine (performer/gradient_engine.h) for a model, a sequence, a Plan and a DeviceProfile.
//
// Memory, as the sum of its parts:
//   parameters + gradients (+ optimizer state when asked)
//   + fronts kept by the front policy and at document starts
//   + (dp) kept slice graphs
//   + the working set of one slice graph: activation_scale · saved elements · dtype bytes
//     + activation_overhead_bytes, where the saved elements are counted from the engine's code
//     (SavedElementsPerToken) — what autograd keeps per token and layer for each prefix mode
//   + the handful of fronts the sliced sweep holds at once (U(n), U(n−1), G(n), G(n−1))
//   + the device's resident overhead: what its libraries hold outside tensors (BLAS workspaces)
//   + where the worker replays the call's slices as CUDA graphs (performer::AutoReplaysSlices), the
//     graphs' private pool, kept for the whole call: the scratch of the slice graph and of the
//     forward sweep's stretch, both captured, plus the allocator's rounding (GraphPoolBytes).
// Time: every slice computation (a forward without graph, a forward building the graph, the
// backward of a graph) costs Σ over its matrix products of F/R · (1 + h/M + h/K + h/N) +
// layer_overhead_s · layers, with F = 2·M·K·N the FLOPs of an (M×K)·(K×N) product, R =
// flops_per_second and h = half_rate_rows: a product runs at half speed when one of its dimensions
// is h (SliceMatmulCost; a backward costs backward_factor forwards, exactly 2 for matrix
// products), + seconds_per_element per saved element; the number of computations follows from the
// policy (dp: the program's exact count). With bfloat16 products (Plan::bf16_products) the linear
// maps' products and the per-layer overhead take the profile's bfloat16 constants (device_profile.h);
// the prefix sums and the element-wise work stay float32.
// The constants come from calibration (planner/calibration.h).
//
// Thread safety: pure functions.
#ifndef SLIMFIT_PLANNER_COST_MODEL_H_
#define SLIMFIT_PLANNER_COST_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "planner/device_profile.h"

namespace slimfit::planner {

struct Workload {
  performer::ModelConfig model;
  int64_t seq_len = 0;    // tokens in the packed stream
  int64_t documents = 1;  // documents in it; each start may force a kept front
  // Optimizer state held on the device next to the gradient (e.g. 8 for Adam in float32; 0: none).
  int64_t optimizer_bytes_per_parameter = 0;
  // The caller keeps a running sum of the gradients of several sequences next to the call's own
  // (a worker's multi-sequence shard): one more gradient-sized buffer, counted in gradient_bytes.
  bool gradient_sum = false;
};

// The bound on a workload's documents, one rule for every caller that takes them from a user:
// OK when 1 ≤ documents ≤ sequence_length, else INVALID_ARGUMENT "<documents_field>: must be between
// 1 and <length_field> (L), got D" (e.g. "spec.documents", "spec.sequence_length").
absl::Status CheckDocuments(int64_t documents, int64_t sequence_length, absl::string_view documents_field,
                            absl::string_view length_field);

struct Prediction {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t kept_bytes = 0;        // fronts and slice graphs kept by the policy and at document starts
  int64_t working_bytes = 0;     // one slice graph and the sweep's own fronts
  int64_t resident_bytes = 0;    // the device's resident overhead (DeviceProfile::resident_overhead_bytes)
  int64_t graph_pool_bytes = 0;  // the CUDA graphs' pool where slices are replayed (GraphPoolBytes)
  int64_t peak_bytes = 0;        // the sum of the above
  double seconds = 0;
  int64_t slice_forwards = 0;  // forward slice computations (0 for full back-propagation: 1)
};

// Elements autograd saves per token, summed over layers and the output head, for one slice graph.
double SavedElementsPerToken(const performer::ModelConfig& model, performer::PrefixMode mode, int64_t block);

// Bytes of one front for the whole model (every layer's numerator and denominator).
int64_t FrontBytes(const performer::ModelConfig& model, performer::DType dtype);

// The matrix products of a forward over S tokens (with the output head and the last layer's G
// when `with_output`; the forward sweep skips them): their FLOPs F = Σ 2·M·K·N and their
// size-weighted FLOPs H = Σ 2·M·K·N · (1/M + 1/K + 1/N), so that time = (F + h·H) / R.
struct MatmulCost {
  double flops = 0;
  double size_weighted_flops = 0;
  // The part of both that is the linear maps' (q|k|v, the FFN, the output head): the products
  // bfloat16 products round; the rest is the prefix sums' (and FAVOR+'s projections).
  double linear_flops = 0;
  double linear_size_weighted_flops = 0;
};
MatmulCost SliceMatmulCost(const performer::ModelConfig& model, int64_t tokens, performer::PrefixMode mode,
                           int64_t block, bool with_output);

// Seconds of one forward slice computation over `tokens` by the profile's time constants.
double SliceSeconds(const performer::ModelConfig& model, int64_t tokens, const performer::Plan& plan,
                    bool with_output, const DeviceProfile& profile);

// Bytes of the buffers in which the engine gathers small CPU slices' weight gradients before adding
// them (performer::BatchedWeightGradientBytes, the engine's own rule, on a CPU); 0 on CUDA and for
// plans that do not batch. Conservative: counted in the working set for the whole call (the sweep
// policies allocate them at the first backward), and for calls the planner cannot tell run through
// autograd (the hand-written path turned off); none with bfloat16 products.
int64_t BatchedWeightGradientBytes(const performer::ModelConfig& model, const performer::Plan& plan,
                                   const DeviceProfile& profile);

// Whether a worker with this profile makes the forward copies of the FFN and output weights when a
// plan in `dtype` asks for them (Plan::copy_forward_weights): on a CPU in float32 without bfloat16
// products (which keep bfloat16 copies of every linear weight instead: performer::PrepareForwardLayouts),
// where the Bazel-built engine runs its products in oneDNN (performer::CopiesForwardLayouts). A
// CMake-built CPU worker (no oneDNN) makes none: its calibration says so
// (DeviceProfile::forward_weight_copies).
bool ForwardCopiesApply(const DeviceProfile& profile, performer::DType dtype, bool bf16_products);

// Slices the engine's forward sweep runs per stretch under `plan` (gradient_engine.cc):
// performer::kSweepSlices (sweep_stretch_rule.h) where no front inside a stretch is needed, 1 for store, for
// dp (whose schedule advances slice by slice) and for relu's onset bookkeeping. Document starts break
// stretches too; the model ignores that (a conservative choice for time).
int64_t SweepSlicesPerStretch(const performer::ModelConfig& model, const performer::Plan& plan);

// Mixed precision (Plan::bf16_products): the bfloat16 copies a matrix product makes of its
// activation operand and of its result, counted at the largest product of a computation over
// `tokens` rows (the FFN's or the output map's: tokens · (d_model + max(d_ff, vocab)) values, 2
// bytes each); SliceGraphBytes and SweepStretchBytes add it to such plans. The weights' bfloat16
// copies are made once per call and counted with the engine's weight copies (Predict).
int64_t Bf16ProductBytes(const performer::ModelConfig& model, int64_t tokens);

// ... and, in a backward (SliceGraphBytes), the largest weight-gradient product's bfloat16 result
// (max(3·d², d·d_ff, d·vocab) values: the fused q | k | v map's, the FFN's or the output map's),
// which is added into its float32 sink through a float32 copy on a CPU (LibTorch's CPU kernels
// cast a mixed-dtype operand into a temporary; CUDA's cast as they go): 6 bytes a value on a CPU,
// 2 on a GPU. Measured on a CPU at d_model 512, C = 16: 5.7 MiB, the 6 predicted (BENCHMARKS.md).
int64_t Bf16WeightGradientBytes(const performer::ModelConfig& model, const DeviceProfile& profile);

// Bytes of the forward sweep's largest stretch of a sliced call (plan.slice > 0): a graph-free
// forward over up to SweepSlicesPerStretch slices.
int64_t SweepStretchBytes(const performer::ModelConfig& model, int64_t seq_len, const performer::Plan& plan);

// Device bytes the CUDA graphs of a call's replayed slices keep (DeviceProfile::replays_slices):
// SliceGraphBytes(C) (twice under resync, which replays steps from kept fronts and by
// subtraction) + SweepStretchBytes + graph_pool_overhead_bytes; 0 for full back-propagation, for
// calls the engine runs op by op (performer::AutoReplaysSlices) and on profiles of devices that do
// not replay (not CUDA, or replays_slices false).
int64_t GraphPoolBytes(const performer::ModelConfig& model, int64_t seq_len, const performer::Plan& plan,
                       const DeviceProfile& profile);

// Bytes of a slice graph over S tokens (working set), by the calibrated model.
int64_t SliceGraphBytes(const performer::ModelConfig& model, int64_t tokens, const performer::Plan& plan,
                        const DeviceProfile& profile);

// INVALID_ARGUMENT for an invalid model, workload or plan (as Plan::Validate), or a dp schedule
// the programs refuse.
absl::StatusOr<Prediction> Predict(const Workload& workload, const performer::Plan& plan,
                                   const DeviceProfile& profile);

// As Predict, with the dp program's forward count supplied by the caller (a plan search asks one
// BpttPolicy for many budgets instead of solving the program per candidate). For dp the kept
// memory is bounded by the budget: `slots` fronts (HSM), slice graphs (ISM) or front units (MSM).
absl::StatusOr<Prediction> PredictWithForwards(const Workload& workload, const performer::Plan& plan,
                                               const DeviceProfile& profile, int64_t dp_forwards);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_COST_MODEL_H_
