#include "planner/calibration.h"

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <optional>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/process_memory.h"
#include "performer/cpu_runtime.h"
#include "performer/gradient_engine.h"
#include "performer/memory_tracker.h"
#include "performer/performer_model.h"
#include "performer/slice_replay_rule.h"
#include "planner/cost_model.h"

namespace slimfit::planner {

using base::RetainFreedHeapMemory;
using performer::ComputeGradient;
using performer::ConfigureCpuThreads;
using performer::DeviceMemoryBytes;
using performer::DTypeBytes;
using performer::GradientResult;
using performer::ModelConfig;
using performer::PackedBatch;
using performer::PerformerModel;
using performer::Plan;

namespace {

std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "unknown CPU";
}

// Least squares for y ≈ X·w over the columns of x in `mask` (the other weights 0), by the normal
// equations (XᵀX) w = Xᵀy with Gaussian elimination and partial pivoting; nullopt when singular.
// The columns are scaled to unit norm first: probes' FLOPs (~1e11) beside their layer counts (~1e2)
// would otherwise leave no pivot small enough to call a nearly collinear system singular.
template <size_t K>
std::optional<std::array<double, K>> LeastSquaresOn(const std::vector<std::array<double, K>>& x,
                                                    const std::vector<double>& y, unsigned mask) {
  std::vector<size_t> columns;
  for (size_t j = 0; j < K; ++j) {
    if (mask & (1u << j)) columns.push_back(j);
  }
  const size_t n = columns.size();
  std::vector<double> norms(n, 0);
  for (size_t r = 0; r < x.size(); ++r) {
    for (size_t i = 0; i < n; ++i) norms[i] += x[r][columns[i]] * x[r][columns[i]];
  }
  for (double& norm : norms) {
    norm = std::sqrt(norm);
    if (!(norm > 0) || !std::isfinite(norm)) return std::nullopt;
  }
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0));
  for (size_t r = 0; r < x.size(); ++r) {
    for (size_t i = 0; i < n; ++i) {
      const double xi = x[r][columns[i]] / norms[i];
      for (size_t j = 0; j < n; ++j) a[i][j] += xi * x[r][columns[j]] / norms[j];
      a[i][n] += xi * y[r];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    size_t pivot = i;
    for (size_t k = i + 1; k < n; ++k) {
      if (std::abs(a[k][i]) > std::abs(a[pivot][i])) pivot = k;
    }
    std::swap(a[i], a[pivot]);
    if (std::abs(a[i][i]) < 1e-12) return std::nullopt;  // the unit diagonal's residual: collinear
    for (size_t k = 0; k < n; ++k) {
      if (k == i) continue;
      const double factor = a[k][i] / a[i][i];
      for (size_t j = i; j <= n; ++j) a[k][j] -= factor * a[i][j];
    }
  }
  std::array<double, K> w{};
  for (size_t i = 0; i < n; ++i) w[columns[i]] = a[i][n] / a[i][i] / norms[i];
  return w;
}

// Least squares for y ≈ X·w with w ≥ 0 over small dense problems: solves the normal equations on
// every subset of columns that holds the first and keeps the non-negative solution with the least
// relative error (at most 2^3 subsets here).
template <size_t K>
std::array<double, K> NonNegativeLeastSquares(const std::vector<std::array<double, K>>& x,
                                              const std::vector<double>& y) {
  std::array<double, K> best{};
  double best_error = INFINITY;
  for (unsigned mask = 1; mask < (1u << K); mask += 2) {
    const std::optional<std::array<double, K>> w = LeastSquaresOn(x, y, mask);
    if (!w.has_value() || std::any_of(w->begin(), w->end(), [](double v) { return v < 0; })) continue;
    // Relative error: probes span orders of magnitude.
    double error = 0;
    for (size_t r = 0; r < x.size(); ++r) {
      double predicted = 0;
      for (size_t j = 0; j < K; ++j) predicted += x[r][j] * (*w)[j];
      error += std::pow((predicted - y[r]) / y[r], 2);
    }
    if (error < best_error) {
      best_error = error;
      best = *w;
    }
  }
  return best;
}

// A sliced probe whose graphs kept a pool: what GraphPoolOverheadBytes needs once activation_scale
// is known.
struct PoolPoint {
  ModelConfig model;
  int64_t seq_len = 0;
  Plan plan;
  int64_t pool_bytes = 0;
};

// `tokens` random tokens of the model's vocabulary, one document, drawn from `seed`.
PackedBatch RandomBatch(const ModelConfig& model, int64_t tokens, uint64_t seed) {
  PackedBatch batch;
  std::mt19937_64 generator(seed);
  for (int64_t i = 0; i < tokens; ++i)
    batch.tokens.push_back(static_cast<int64_t>(generator() % model.vocab));
  return batch;
}

}  // namespace

int64_t GraphPoolOverheadBytes(const std::vector<std::array<int64_t, 2>>& scratch_and_pool) {
  int64_t overhead = 0;
  for (const auto& [scratch, pool] : scratch_and_pool) overhead = std::max(overhead, pool - scratch);
  return overhead;
}

absl::Status FitBf16Products(const std::vector<Bf16Probe>& probes, DeviceProfile* profile) {
  // bfloat16 − float32 = F·Δs + H·Δt + layers·Δo with s = 1/rate, t = half_rate_rows/rate and o the
  // layer overhead; each row relative to the probe's float32 time.
  std::vector<std::array<double, 3>> x;
  std::vector<double> y;
  for (const Bf16Probe& probe : probes) {
    if (!(probe.float32_seconds > 0) || !(probe.bf16_seconds > 0)) continue;
    const double w = 1.0 / probe.float32_seconds;
    x.push_back({probe.linear_flops * w, probe.linear_size_weighted_flops * w, probe.layer_computations * w});
    y.push_back((probe.bf16_seconds - probe.float32_seconds) * w);
  }
  if (x.size() < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("fitting the bfloat16 constants needs three probes timed both ways, got ", x.size()));
  }
  // The constants must stay in range: s ≥ s32 / kMaxBf16RateGain, t ≥ 0, o ≥ 0. A bound the fit
  // crosses is fixed there and the other unknowns fitted again without it (at most three rounds).
  const double float32_s = 1.0 / profile->flops_per_second;
  const std::array<double, 3> lowest = {float32_s / kMaxBf16RateGain - float32_s,
                                        -profile->half_rate_rows * float32_s, -profile->layer_overhead_s};
  std::array<double, 3> delta{};
  unsigned free = 0b111;
  while (free != 0) {
    std::vector<double> rest = y;  // y less the fixed unknowns' part
    for (size_t r = 0; r < x.size(); ++r) {
      for (size_t j = 0; j < 3; ++j) {
        if (!(free & (1u << j))) rest[r] -= x[r][j] * delta[j];
      }
    }
    const std::optional<std::array<double, 3>> fitted = LeastSquaresOn(x, rest, free);
    if (!fitted.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", x.size(), " probes timed both ways cannot tell the bfloat16 constants apart"));
    }
    int crossed = -1;
    for (size_t j = 0; j < 3; ++j) {
      if (!(free & (1u << j))) continue;
      delta[j] = (*fitted)[j];
      if (crossed < 0 && delta[j] < lowest[j]) crossed = static_cast<int>(j);
    }
    if (crossed < 0) break;
    delta[crossed] = lowest[crossed];
    free &= ~(1u << crossed);
  }
  const double s = float32_s + delta[0];
  profile->bf16_flops_per_second = 1.0 / s;
  profile->bf16_half_rate_rows = std::max(profile->half_rate_rows * float32_s + delta[1], 0.0) / s;
  profile->bf16_layer_overhead_s = std::max(profile->layer_overhead_s + delta[2], 0.0);
  return absl::OkStatus();
}

std::vector<std::string> CalibrationResult::Warnings() const {
  std::vector<std::string> warnings;
  if (!bf16_error.empty()) {
    warnings.push_back(absl::StrCat(
        "this device cannot run bfloat16 products (jobs with them will fail on it): ", bf16_error));
  }
  if (!bf16_fit_error.empty()) {
    warnings.push_back(
        absl::StrCat("bfloat16 plans are predicted with the float32 constants: ", bf16_fit_error));
  }
  return warnings;
}

ModelConfig ProbeModel(int64_t d_model) {
  ModelConfig config;
  config.d_model = d_model;
  config.layers = 2;
  config.heads = 4;
  config.d_ff = 4 * d_model;
  return config;
}

absl::StatusOr<CalibrationResult> Calibrate(const CalibrationOptions& options) {
  if (options.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be at least 1, got ", options.threads));
  }
  if (options.models.empty()) return absl::InvalidArgumentError("calibration needs at least one probe model");
  if (options.slices.size() * options.models.size() < 3) {
    return absl::InvalidArgumentError("calibration needs at least three probes (slice sizes)");
  }
  c10::optional<c10::Device> device;
  try {
    device = c10::Device(options.device);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown device '", options.device, "': ", e.what_without_backtrace()));
  }
  if (device->is_cpu()) {
    RetainFreedHeapMemory();
    if (absl::Status s = ConfigureCpuThreads(options.threads, performer::ToScalarType(options.dtype));
        !s.ok()) {
      return s;
    }
  }
  CalibrationResult result;
  DeviceProfile& profile = result.profile;
  profile.device = options.device;
  profile.device_name = device->is_cpu() ? CpuName() : options.device;
  profile.threads = options.threads;
  // The device's memory, recorded for operators (budgets are given to workers, not taken from it).
  absl::StatusOr<int64_t> device_memory = DeviceMemoryBytes(*device);
  profile.total_memory_bytes = device_memory.ok() ? *device_memory : 0;

  int64_t resident = 0;
  std::vector<PoolPoint> pool_points;
  bool replayed = false;  // some probe replayed its slices as CUDA graphs (not kRerun's re-runs)
  std::vector<std::array<double, 2>> memory_x;
  std::vector<double> memory_y;
  std::vector<std::array<double, 4>> time_x;
  std::vector<double> time_y;
  // bfloat16 products: every probe runs both ways, alternating (float32 profiles only: bfloat16
  // rounds float32 values); the first failure stops them (the device cannot run them).
  bool time_bf16 = options.dtype == performer::DType::kFloat32;
  std::vector<Bf16Probe> bf16_probes;
  for (const ModelConfig& probe_model : options.models) {
    absl::StatusOr<PerformerModel> model =
        PerformerModel::Create(probe_model, options.dtype, *device, options.seed);
    if (!model.ok()) return model.status();
    const PackedBatch batch = RandomBatch(probe_model, options.seq_len, options.seed);
    for (int64_t slice : options.slices) {
      Plan plan;
      plan.slice = slice;
      plan.dtype = options.dtype;
      Plan bf16_plan = plan;
      bf16_plan.bf16_products = true;
      std::vector<double> seconds, bf16_seconds;
      GradientResult last;  // the float32 call's: the memory fit's
      performer::GradientOptions gradient_options;
      gradient_options.slice_replay = options.slice_replay;
      for (int run = 0; run <= options.repeats; ++run) {
        last = GradientResult();
        absl::StatusOr<GradientResult> gradient = ComputeGradient(*model, batch, plan, gradient_options);
        if (!gradient.ok()) return gradient.status();
        if (run > 0) seconds.push_back(gradient->seconds);
        last = *std::move(gradient);
        // Only the float32 call's measurements are kept: its gradient would otherwise be on the
        // device when the bfloat16 call starts, and count in what the device holds (resident).
        last.gradients.clear();
        if (!time_bf16) continue;
        absl::StatusOr<GradientResult> mixed = ComputeGradient(*model, batch, bf16_plan, gradient_options);
        if (!mixed.ok()) {
          result.bf16_error = std::string(mixed.status().message());
          time_bf16 = false;
          bf16_probes.clear();
          continue;
        }
        if (run > 0) bf16_seconds.push_back(mixed->seconds);
        // What bfloat16 products leave on the device (their BLAS workspaces) counts as resident.
        resident = std::max(resident, mixed->start_bytes - model->parameter_bytes());
      }
      std::sort(seconds.begin(), seconds.end());
      std::sort(bf16_seconds.begin(), bf16_seconds.end());
      ProbeResult probe{plan, options.seq_len, seconds[seconds.size() / 2],
                        last.peak_bytes - last.start_bytes - model->parameter_bytes(), last.graph_pool_bytes};
      result.probes.push_back(probe);
      replayed = replayed || (device->is_cuda() && options.slice_replay == performer::SliceReplay::kAuto &&
                              last.replayed_slices > 0);
      if (probe.graph_pool_bytes > 0)
        pool_points.push_back({probe_model, options.seq_len, plan, probe.graph_pool_bytes});
      // What the device held before the call beyond the probe model's parameters: after the
      // untimed first run, the libraries' workspaces (cuBLAS keeps one per stream and thread, the
      // CUDA graphs add a side stream); the largest over the probes, which run graphs and not.
      resident = std::max(resident, last.start_bytes - model->parameter_bytes());

      // Memory: working = scale · elements · dtype + overhead (+ the sweep's own fronts).
      const int64_t tokens = slice == 0 ? options.seq_len : slice;
      const double elements = SavedElementsPerToken(probe_model, plan.prefix_mode, plan.block) * tokens;
      // ... and the engine's forward weight layouts (PrepareForwardLayouts), which the cost model
      // adds on its own.
      const bool copies =
          plan.copy_forward_weights && performer::CopiesForwardLayouts(*device, options.dtype);
      const double layouts =
          static_cast<double>(probe_model.forward_layout_values(copies) * DTypeBytes(options.dtype));
      const double fronts = (slice == 0 ? 0 : 4.0 * FrontBytes(probe_model, options.dtype)) + layouts +
                            static_cast<double>(BatchedWeightGradientBytes(probe_model, plan, profile));
      memory_x.push_back({elements * DTypeBytes(options.dtype), 1.0});
      memory_y.push_back(
          std::max(1.0, static_cast<double>(probe.working_bytes - probe.graph_pool_bytes) - fronts));

      // Time: Σ over computations w · [(F + h·H)/R + e · elements + o · layers] (cost_model.h),
      // w = 1 for forwards and backward_factor for backwards: linear in 1/R, h/R, e and o.
      const double backward = profile.backward_factor;
      double flops = 0, size_weighted = 0, elements_touched = 0, computations = 0;
      Bf16Probe bf16_probe;
      auto add = [&](int64_t rows, bool with_output, double weight, double count) {
        const MatmulCost cost = SliceMatmulCost(probe_model, rows, plan.prefix_mode, plan.block, with_output);
        flops += weight * count * cost.flops;
        size_weighted += weight * count * cost.size_weighted_flops;
        bf16_probe.linear_flops += weight * count * cost.linear_flops;
        bf16_probe.linear_size_weighted_flops += weight * count * cost.linear_size_weighted_flops;
        computations += weight * count * static_cast<double>(probe_model.layers);
        elements_touched += weight * count * static_cast<double>(rows) *
                            SavedElementsPerToken(probe_model, plan.prefix_mode, plan.block);
      };
      if (slice == 0) {
        add(options.seq_len, true, 1 + backward, 1);
      } else {
        const int64_t n = (options.seq_len + slice - 1) / slice;
        const int64_t last_rows = options.seq_len - (n - 1) * slice;
        // The forward sweep runs its n − 1 slices in stretches (SweepSlicesPerStretch).
        const int64_t per = SweepSlicesPerStretch(probe_model, plan);
        const int64_t stretches = (n - 1) / per;
        if (stretches > 0) add(per * slice, false, 1, static_cast<double>(stretches));
        if ((n - 1) % per > 0) add(((n - 1) % per) * slice, false, 1, 1);
        add(slice, true, 1 + backward, static_cast<double>(n - 1));
        add(last_rows, true, 1 + backward, 1);
      }
      time_x.push_back({flops, size_weighted, elements_touched, computations});
      time_y.push_back(probe.seconds);
      if (time_bf16) {
        bf16_probe.layer_computations = computations;
        bf16_probe.float32_seconds = probe.seconds;
        bf16_probe.bf16_seconds = bf16_seconds[bf16_seconds.size() / 2];
        bf16_probes.push_back(bf16_probe);
        if (slice == 0) result.bf16_call_time_ratio = bf16_probe.bf16_seconds / bf16_probe.float32_seconds;
      }
    }
    // The graphs' pool at the C the probes above replay few slices of (one untimed call each: a
    // call captures its own graphs).
    if (!device->is_cuda() || options.slice_replay != performer::SliceReplay::kAuto) continue;
    const PackedBatch long_batch = RandomBatch(probe_model, options.graph_pool_seq_len, options.seed);
    for (int64_t slice : options.graph_pool_slices) {
      if (!performer::AutoReplaysSlices((options.graph_pool_seq_len + slice - 1) / slice, slice)) continue;
      Plan plan;
      plan.slice = slice;
      plan.dtype = options.dtype;
      performer::GradientOptions gradient_options;
      gradient_options.slice_replay = options.slice_replay;
      absl::StatusOr<GradientResult> gradient = ComputeGradient(*model, long_batch, plan, gradient_options);
      if (!gradient.ok()) return gradient.status();
      ProbeResult probe{plan,
                        options.graph_pool_seq_len,
                        gradient->seconds,
                        gradient->peak_bytes - gradient->start_bytes - model->parameter_bytes(),
                        gradient->graph_pool_bytes,
                        /*pool_only=*/true};
      result.probes.push_back(probe);
      replayed = replayed || gradient->replayed_slices > 0;
      if (probe.graph_pool_bytes > 0) {
        pool_points.push_back({probe_model, options.graph_pool_seq_len, plan, probe.graph_pool_bytes});
      }
    }
  }

  const std::array<double, 2> memory = NonNegativeLeastSquares<2>(memory_x, memory_y);
  profile.activation_scale = memory[0] > 0 ? memory[0] : 1.0;
  profile.activation_overhead_bytes = static_cast<int64_t>(std::llround(memory[1]));
  profile.resident_overhead_bytes = resident;
  profile.replays_slices = replayed;
  std::vector<std::array<int64_t, 2>> pools;  // the cost model's pool (its overhead still 0 here), measured
  for (const PoolPoint& point : pool_points) {
    pools.push_back({GraphPoolBytes(point.model, point.seq_len, point.plan, profile), point.pool_bytes});
  }
  profile.graph_pool_overhead_bytes = GraphPoolOverheadBytes(pools);
  profile.forward_weight_copies = performer::CopiesForwardLayouts(*device, performer::DType::kFloat32);
  const std::array<double, 4> time = NonNegativeLeastSquares<4>(time_x, time_y);
  if (!(time[0] > 0)) {
    return absl::InternalError("calibration could not fit a FLOP rate to the probes' times");
  }
  profile.flops_per_second = 1.0 / time[0];
  profile.half_rate_rows = time[1] / time[0];
  profile.seconds_per_element = time[2];
  profile.layer_overhead_s = time[3];
  if (!bf16_probes.empty()) {
    if (absl::Status s = FitBf16Products(bf16_probes, &profile); !s.ok()) {
      // bfloat16 plans are then predicted as float32 ones; the profile is good for everything else.
      result.bf16_fit_error = std::string(s.message());
    }
  } else {
    result.bf16_call_time_ratio = 1.0;  // not measured (float64, or the device cannot run them)
  }
  if (absl::Status s = profile.Validate(); !s.ok()) return s;
  return result;
}

}  // namespace slimfit::planner
