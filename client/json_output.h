// JSON renderings shared by the `slimfit` commands' --json output (nlohmann::ordered_json, so keys
// come out in the documented order).
//
// Thread safety: pure functions.
#ifndef SLIMFIT_CLIENT_JSON_OUTPUT_H_
#define SLIMFIT_CLIENT_JSON_OUTPUT_H_

#include <string>

#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "planner/device_profile.h"
#include "planner/transformer_baselines.h"

namespace slimfit::client {

// Keys as the fields of proto/device_profile.proto, in this order: device, device_name, threads,
// total_memory_bytes, activation_scale, activation_overhead_bytes, resident_overhead_bytes,
// forward_weight_copies, replays_slices, graph_pool_overhead_bytes, flops_per_second,
// half_rate_rows, seconds_per_element, layer_overhead_s, backward_factor, bf16_flops_per_second,
// bf16_half_rate_rows, bf16_layer_overhead_s.
nlohmann::ordered_json DeviceProfileToJson(const planner::DeviceProfile& profile);

// Exactly the keys slice (0 = full back-propagation), prefix_mode ("chunked", "cumsum"), block
// (null for cumsum), front_policy ("reverse", "store", "resync", "dp"; null for full
// back-propagation), slots (dp, else null), resync_every (resync, else null), recompute ("none":
// a slice graph keeps every activation; "layers": only each layer's input, the layer is recomputed
// during its backward), predicted_peak_bytes, predicted_time_s.
nlohmann::ordered_json PlanToJson(const performer::Plan& plan);

// vocab, d_model, layers, heads, d_ff, features, feature_multiplier, ln, parameters.
nlohmann::ordered_json ModelConfigToJson(const performer::ModelConfig& model);

// One object per row: layout, recompute, activation_bytes, kept_bytes_per_layer,
// recomputed_bytes_per_layer, model_state_bytes, total_bytes, compute_overhead_fraction.
nlohmann::ordered_json BaselineRowsToJson(absl::Span<const planner::BaselineRow> rows);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_JSON_OUTPUT_H_
