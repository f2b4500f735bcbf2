// Plan: how one gradient call trades memory for time (DESIGN.md, "Plan"). A plain value type that
// the planner produces, the service carries and the engine executes; free of LibTorch.
//
// Example: slices of 256 tokens, chunked prefix sums in blocks of 64, fronts walked back by
// subtraction:
//   Plan plan;
//   plan.slice = 256; plan.prefix_mode = PrefixMode::kChunked; plan.block = 64;
//   plan.front_policy = FrontPolicy::kReverse;
//
// Thread safety: a plain value type.
#ifndef SLIMFIT_PERFORMER_PLAN_H_
#define SLIMFIT_PERFORMER_PLAN_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "performer/checkpoint_schedule.h"

namespace slimfit::performer {

// How one stretch of tokens computes its causal prefix sums.
enum class PrefixMode {
  kCumsum,   // materialise every prefix state (S·k·M·d values): most memory
  kChunked,  // blocks of `block` tokens; saves only q, k, v and the start front
};

// How the backward sweep obtains the front entering slice n, U(n−1).
enum class FrontPolicy {
  kReverse,  // subtract slice n's contributions from U(n) (Likhosherstov et al., eq. 9); O(1) memory
  kStore,    // keep every front from the forward sweep; N fronts of memory
  kResync,   // reverse, but keep every `resync_every`-th front so drift is reset
  kDp,  // keep at most `slots` fronts/slice graphs, following a checkpoint schedule (checkpoint_schedule.h)
};

// The most fronts the subtracting policies (kReverse, kResync) keep in one call beyond their own,
// where a front rebuilt by subtraction would lose its precision (the denominators it would be
// rebuilt from have grown too far past its own: sliced_gradient.h); further such fronts are
// recomputed by a forward instead. The planner counts them. Ordinary text needs 0–2: the growth
// is about the growth in tokens, and each keep covers kMaxRebuildGrowth× of it.
inline constexpr int64_t kMaxConditioningFronts = 2;

// The conditioning guard's growth bound: a front is rebuilt by subtraction only from one whose
// denominator components are at most this many times its own, so it carries at most about 8 bits
// more rounding than that front (2⁻¹⁵ relative in float32), in any dtype.
inline constexpr double kMaxRebuildGrowth = 256;

// What one slice's autograd graph keeps (Korthikanti et al.'s trade at layer granularity).
enum class LayerRecompute {
  kNone,    // every activation of every layer
  kLayers,  // only each layer's input; a layer is recomputed during its backward
};

enum class DType { kFloat32, kFloat64 };

absl::string_view PrefixModeName(PrefixMode mode);
absl::StatusOr<PrefixMode> ParsePrefixMode(absl::string_view name);
absl::string_view FrontPolicyName(FrontPolicy policy);
absl::StatusOr<FrontPolicy> ParseFrontPolicy(absl::string_view name);
absl::string_view LayerRecomputeName(LayerRecompute recompute);  // "none", "layers"
absl::StatusOr<LayerRecompute> ParseLayerRecompute(absl::string_view name);
absl::string_view DTypeName(DType dtype);  // "float32", "float64"
absl::StatusOr<DType> ParseDType(absl::string_view name);
int64_t DTypeBytes(DType dtype);
// The error for bfloat16 products in another dtype than float32 (Plan::Validate, and every request
// that asks for them before a plan exists; callers prefix their field): "bfloat16 products need
// dtype float32 (the float32 values they round), not float64".
std::string Bf16ProductsDTypeError(DType dtype);

struct Plan {
  // Slice size C in tokens; 0 means ordinary full-sequence back-propagation (no slicing).
  int64_t slice = 0;
  PrefixMode prefix_mode = PrefixMode::kChunked;
  int64_t block = 64;  // tokens per block in chunked mode
  FrontPolicy front_policy = FrontPolicy::kReverse;
  int64_t resync_every = 0;  // kResync: keep the front entering every r-th slice
  // kDp: which program of Gruslys et al. (2016) (HSM keeps fronts, ISM slice graphs, MSM both), its memory
  // budget in units of one front, and for MSM the sizes α (a slice graph with its input front) and β (a slice
  // graph whose input front is held anyway), in fronts — see performer/checkpoint_schedule.h.
  ScheduleKind schedule = ScheduleKind::kHsm;
  int64_t slots = 0;
  double alpha = 0;
  double beta = 0;
  LayerRecompute recompute = LayerRecompute::kNone;  // sliced plans only
  DType dtype = DType::kFloat32;
  int threads = 0;  // intra-op threads; 0 leaves the process setting alone
  // Where the products run in oneDNN (float32 on a CPU), keep a contiguous [in, out] copy of the
  // FFN and output weights for the forward products: faster (oneDNN takes a transposed weight at
  // half to two thirds of the speed on small slices: 1.14x the time at C = 64 and 16 on config A),
  // one more copy of those weights in memory. False keeps one
  // layout, for budgets the copy does not fit (performer_model.h, CopiesForwardLayouts).
  bool copy_forward_weights = true;
  // Mixed precision: the linear maps' matrix products (forward, input and weight gradients) in
  // bfloat16 with float32 accumulation, everything else in float32 — features, prefix sums and
  // fronts (so recovering a front by subtraction stays a float32 subtraction), LayerNorm, GELU, the
  // loss and the gradient sums. The gradient is then the float32 one to bfloat16 rounding (measured
  // 4e-3 to 6e-3 relative, BENCHMARKS.md), and slicing adds nothing beyond that. Runs on the
  // hand-written path where it applies (explicit_backprop.h), as float32 does, with the weights
  // rounded once per call. For GPUs with bfloat16 matrix units (2.4x faster on an H100 at d_model
  // 1024 through autograd); CPUs
  // run it at their own bfloat16 speed. REQUIRES: dtype kFloat32 (Validate).
  bool bf16_products = false;

  // Filled in by the planner; informational for the engine.
  int64_t predicted_peak_bytes = 0;
  double predicted_time_s = 0;
  std::string reason;

  // INVALID_ARGUMENT naming the field when the plan cannot run on a sequence of `seq_len` tokens.
  absl::Status Validate(int64_t seq_len) const;
  std::string DebugString() const;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PLAN_H_
