#include "planner/device_profile.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace slimfit::planner {

absl::Status DeviceProfile::Validate() const {
  auto positive = [](const char* field, double value) -> absl::Status {
    if (std::isfinite(value) && value > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("device profile: ", field, " must be positive, got ", value));
  };
  for (auto [field, value] : {std::pair<const char*, double>{"activation_scale", activation_scale},
                              {"flops_per_second", flops_per_second},
                              {"backward_factor", backward_factor},
                              {"threads", static_cast<double>(threads)}}) {
    if (absl::Status s = positive(field, value); !s.ok()) return s;
  }
  if (!(half_rate_rows >= 0) || !(layer_overhead_s >= 0) || !(seconds_per_element >= 0) ||
      activation_overhead_bytes < 0 || resident_overhead_bytes < 0 || total_memory_bytes < 0 ||
      graph_pool_overhead_bytes < 0) {
    return absl::InvalidArgumentError(
        "device profile: half_rate_rows, seconds_per_element, layer_overhead_s, activation_overhead_bytes, "
        "resident_overhead_bytes, total_memory_bytes and graph_pool_overhead_bytes must not be negative");
  }
  // Bounds no device comes near, so that predicted peaks (int64 bytes) cannot overflow.
  constexpr int64_t kMaxBytes = int64_t{1} << 50;  // 1 PiB
  if (activation_overhead_bytes > kMaxBytes || resident_overhead_bytes > kMaxBytes ||
      total_memory_bytes > kMaxBytes || graph_pool_overhead_bytes > kMaxBytes) {
    return absl::InvalidArgumentError(
        "device profile: activation_overhead_bytes, resident_overhead_bytes, total_memory_bytes and "
        "graph_pool_overhead_bytes must be at most 1 PiB");
  }
  if (activation_scale > 1e3 || backward_factor > 1e3) {
    return absl::InvalidArgumentError(
        absl::StrCat("device profile: activation_scale and backward_factor must be "
                     "at most 1000, got ",
                     activation_scale, " and ", backward_factor));
  }
  if (!(std::isfinite(bf16_flops_per_second) && bf16_flops_per_second >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device profile: bf16_flops_per_second must be ≥ 0 (0: unmeasured), got ", bf16_flops_per_second));
  }
  if (!(bf16_half_rate_rows >= 0) || !(bf16_layer_overhead_s >= 0) || !std::isfinite(bf16_half_rate_rows) ||
      !std::isfinite(bf16_layer_overhead_s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device profile: bf16_half_rate_rows and bf16_layer_overhead_s "
                     "must be finite and ≥ 0, got ",
                     bf16_half_rate_rows, " and ", bf16_layer_overhead_s));
  }
  return absl::OkStatus();
}

}  // namespace slimfit::planner
