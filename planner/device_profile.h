// DeviceProfile: what the planner knows about one device — its memory and how fast it runs the
// engine — as constants of the cost model (planner/cost_model.h). Produced by calibration
// (planner/calibration.h: short probes of the real engine), stored as a text-format proto
// (proto/device_profile.proto) by `slimfit calibrate` and by workers in their state directory.
//
// Thread safety: a plain value type.
#ifndef SLIMFIT_PLANNER_DEVICE_PROFILE_H_
#define SLIMFIT_PLANNER_DEVICE_PROFILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace slimfit::planner {

struct DeviceProfile {
  std::string device = "cpu";  // as given to --device: "cpu", "cuda:0"
  std::string device_name;     // e.g. the CPU model or GPU name
  int threads = 1;
  int64_t total_memory_bytes = 0;  // physical memory of the device (0: unknown)

  // Memory. Working bytes of one slice graph of S tokens =
  //   activation_scale · (analytic saved elements of S tokens) · dtype bytes + activation_overhead_bytes.
  double activation_scale = 1.0;
  int64_t activation_overhead_bytes = 0;
  // Bytes the process holds on the device outside the model's tensors once the engine has run (the
  // BLAS libraries' workspaces: ~64 MiB per CUDA stream for cuBLAS and cuBLASLt, none on a CPU).
  // The device's allocator counts them, so every measured peak holds them; the cost model adds them
  // once to every predicted peak.
  int64_t resident_overhead_bytes = 0;
  // Whether the engine that was calibrated copies the linear weights into its forward layouts for
  // float32 on this device (performer::CopiesForwardLayouts: a CPU with oneDNN products; a CPU
  // worker of a CUDA build has none). True for profiles written before this field existed.
  bool forward_weight_copies = true;
  // Whether the calibrated worker replays slices as CUDA graphs (a CUDA device, graphs on, a build
  // with them). A call whose slices replay (performer::AutoReplaysSlices) keeps the graphs' private
  // memory pool for its whole length: the cost model counts the scratch of the two computations
  // captured — the backward sweep's slice graph and the forward sweep's stretch, which do not reuse
  // each other's blocks — plus graph_pool_overhead_bytes, the caching allocator's rounding of
  // blocks into segments (2 MiB for small blocks, 20 MiB for those of 1–10 MiB), measured by
  // calibration. false and 0 on a CPU, with graphs off, and in profiles written before these fields.
  bool replays_slices = false;
  int64_t graph_pool_overhead_bytes = 0;

  // Time (planner/cost_model.h). One slice computation over S tokens takes
  //   Σ_products F/flops_per_second · (1 + h/M + h/K + h/N)   (h = half_rate_rows; bfloat16
  //                                                            products: see below)
  //   + seconds_per_element · S · saved elements per token     (element-wise work)
  //   + layer_overhead_s · layers.
  double flops_per_second = 1e10;
  double half_rate_rows = 16;
  double seconds_per_element = 0;
  double layer_overhead_s = 1e-4;
  // Backward of a slice graph relative to its forward.
  double backward_factor = 2.0;
  // bfloat16 products (performer::Plan::bf16_products) change the linear maps' products only (the
  // prefix sums and the element-wise work stay float32). Their term becomes
  //   Σ_linear F/bf16_flops_per_second · (1 + h'/M + h'/K + h'/N)   (h' = bf16_half_rate_rows)
  // and each slice computation costs bf16_layer_overhead_s per layer instead of layer_overhead_s:
  // a faster rate, but on a CPU a larger size penalty (the library packs and rounds operands per
  // product), so long slices gain and small ones can lose. Calibration fits the three from the
  // differences between its probes run both ways (float32 profiles only). bf16_flops_per_second 0:
  // unmeasured, and bfloat16 plans are predicted with the float32 constants.
  double bf16_flops_per_second = 0;
  double bf16_half_rate_rows = 0;
  double bf16_layer_overhead_s = 0;

  // INVALID_ARGUMENT naming the field when a constant is out of range.
  absl::Status Validate() const;
};

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_DEVICE_PROFILE_H_
