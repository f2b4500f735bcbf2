// Calibration: short probes of the real gradient engine on a device, fitted into the constants of
// the planner's cost model (device_profile.h, cost_model.h). The planner runs the engine here;
// the engine knows nothing of the planner.
//
// Memory: the working bytes of sliced gradients at a few C (peak − start − gradient, without the
// CUDA graphs' pool) against the model's analytic saved elements give activation_scale and
// activation_overhead_bytes (least squares); what the device holds before a call beyond the
// model's parameters (the libraries' workspaces, once the engine has run) gives
// resident_overhead_bytes; where slices replay as CUDA graphs, the most any probe's graph pool
// held beyond the scratch the cost model counts gives graph_pool_overhead_bytes. Time: the wall times of the
// same probes against their matrix-product FLOPs, their size-weighted FLOPs, the elements they
// touch and their number of slice computations give flops_per_second, half_rate_rows,
// seconds_per_element and layer_overhead_s (non-negative least squares on relative errors); in
// float32, every probe also runs with bfloat16 products, alternating, and the differences give the
// bfloat16 constants (FitBf16Products). A worker runs this at start-up and caches the profile in
// its state directory.
//
// Example:
//   CalibrationOptions options;
//   options.threads = 2;
//   absl::StatusOr<CalibrationResult> result = Calibrate(options);
//
// Thread safety: runs gradients on the device and sets the process's thread counts
// (performer/cpu_runtime.h); do not run other gradients concurrently.
#ifndef SLIMFIT_PLANNER_CALIBRATION_H_
#define SLIMFIT_PLANNER_CALIBRATION_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "performer/gradient_engine.h"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "planner/device_profile.h"

namespace slimfit::planner {

// A 2-layer, 4-head probe model of width d_model with d_ff = 4·d_model.
performer::ModelConfig ProbeModel(int64_t d_model);

struct CalibrationOptions {
  std::string device = "cpu";
  int threads = 1;
  performer::DType dtype = performer::DType::kFloat32;
  // The probe models and sequence: small enough to run in seconds, two widths so the fit sees how
  // matrix-product speed depends on every dimension, not only on the slice size.
  std::vector<performer::ModelConfig> models = {ProbeModel(128), ProbeModel(256), ProbeModel(512)};
  int64_t seq_len = 1024;
  std::vector<int64_t> slices = {16, 64, 256, 0};  // 0: full back-propagation
  int repeats = 2;                                 // timed runs per probe (median)
  // As the worker will run slices (performer::GradientOptions::slice_replay): on a GPU, CUDA graphs
  // change both the per-slice time and the memory the probes measure.
  performer::SliceReplay slice_replay = performer::SliceReplay::kAuto;
  // Where slices replay as CUDA graphs (slice_replay kAuto on a CUDA device): probes that measure
  // only the graphs' memory pool, on every probe model at each of these C over this many tokens
  // (enough slices that every replayed shape is captured; the probes above have few of C = 256).
  int64_t graph_pool_seq_len = 4096;
  std::vector<int64_t> graph_pool_slices = {64, 256};
  uint64_t seed = 1;
};

// One probe's measurements, for reports and tests.
struct ProbeResult {
  performer::Plan plan;
  int64_t seq_len = 0;
  double seconds = 0;
  int64_t working_bytes = 0;     // peak − start − parameters, the graphs' pool included
  int64_t graph_pool_bytes = 0;  // the CUDA graphs' pool; 0 where the slices ran op by op
  bool pool_only = false;        // a graph-pool probe (not in the time and activation fits)
};

// DeviceProfile::graph_pool_overhead_bytes from probes' {scratch, pool} bytes — the scratch the cost
// model counts for a call's graph pool (GraphPoolBytes without the overhead) and the pool the call's
// graphs kept: the most a pool exceeded its scratch, rounded up to a byte; 0 for none.
int64_t GraphPoolOverheadBytes(const std::vector<std::array<int64_t, 2>>& scratch_and_pool);

// One probe timed with float32 and with bfloat16 products: its linear maps' products' FLOPs and
// size-weighted FLOPs (cost_model.h's MatmulCost) and its slice computations' layers, each summed
// over the call's computations with the weight the time model gives them (backward_factor for a
// backward), and the two medians.
struct Bf16Probe {
  double linear_flops = 0;
  double linear_size_weighted_flops = 0;
  double layer_computations = 0;
  double float32_seconds = 0;
  double bf16_seconds = 0;
};

// Sets profile's bf16_flops_per_second, bf16_half_rate_rows and bf16_layer_overhead_s from probes
// timed both ways, given its float32 constants: least squares, each probe relative to its float32
// time, on bfloat16 − float32 = F·Δ(1/rate) + H·Δ(half_rate_rows/rate) + layers·Δ(layer overhead)
// — differences, so that what the float32 fit misses cancels. The rate is held to at most
// kMaxBf16RateGain × flops_per_second, the half-rate rows and the overhead to ≥ 0: a bound the
// fit crosses is fixed and the others fitted again. INVALID_ARGUMENT (the profile untouched) when
// fewer than three probes were timed or they cannot tell the three apart.
inline constexpr double kMaxBf16RateGain = 20.0;
absl::Status FitBf16Products(const std::vector<Bf16Probe>& probes, DeviceProfile* profile);

struct CalibrationResult {
  DeviceProfile profile;
  std::vector<ProbeResult> probes;
  // Full back-propagation of the last probe model with bfloat16 products over its float32 time,
  // as measured (for reports; 1 when not measured).
  double bf16_call_time_ratio = 1.0;
  // Why bfloat16 products could not be timed (the device cannot run them): the profile's bfloat16
  // constants then stay unmeasured, and a job with them fails on this device when it runs. Empty
  // when they were timed (or the profile is float64).
  std::string bf16_error;
  // Why the probes, timed both ways, gave no bfloat16 constants (FitBf16Products): they stay
  // unmeasured, and bfloat16 plans are predicted with the float32 constants. Empty when fitted.
  std::string bf16_fit_error;

  // What the profile leaves unmeasured and why, one sentence each (from bf16_error and
  // bf16_fit_error), for the worker's log and `slimfit calibrate`'s output.
  std::vector<std::string> Warnings() const;
};

// INVALID_ARGUMENT for bad options (unknown device, threads < 1, fewer than three probes, …);
// errors of the engine otherwise.
absl::StatusOr<CalibrationResult> Calibrate(const CalibrationOptions& options);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_CALIBRATION_H_
