#include "client/json_output.h"

namespace slimfit::client {

nlohmann::ordered_json DeviceProfileToJson(const planner::DeviceProfile& profile) {
  nlohmann::ordered_json json;
  json["device"] = profile.device;
  json["device_name"] = profile.device_name;
  json["threads"] = profile.threads;
  json["total_memory_bytes"] = profile.total_memory_bytes;
  json["activation_scale"] = profile.activation_scale;
  json["activation_overhead_bytes"] = profile.activation_overhead_bytes;
  json["resident_overhead_bytes"] = profile.resident_overhead_bytes;
  json["forward_weight_copies"] = profile.forward_weight_copies;
  json["replays_slices"] = profile.replays_slices;
  json["graph_pool_overhead_bytes"] = profile.graph_pool_overhead_bytes;
  json["flops_per_second"] = profile.flops_per_second;
  json["half_rate_rows"] = profile.half_rate_rows;
  json["seconds_per_element"] = profile.seconds_per_element;
  json["layer_overhead_s"] = profile.layer_overhead_s;
  json["backward_factor"] = profile.backward_factor;
  json["bf16_flops_per_second"] = profile.bf16_flops_per_second;
  json["bf16_half_rate_rows"] = profile.bf16_half_rate_rows;
  json["bf16_layer_overhead_s"] = profile.bf16_layer_overhead_s;
  return json;
}

nlohmann::ordered_json PlanToJson(const performer::Plan& plan) {
  using performer::FrontPolicy;
  nlohmann::ordered_json json;
  json["slice"] = plan.slice;
  json["prefix_mode"] = std::string(performer::PrefixModeName(plan.prefix_mode));
  json["block"] = plan.prefix_mode == performer::PrefixMode::kChunked ? nlohmann::ordered_json(plan.block)
                                                                      : nlohmann::ordered_json(nullptr);
  json["front_policy"] = plan.slice == 0
                             ? nlohmann::ordered_json(nullptr)
                             : nlohmann::ordered_json(performer::FrontPolicyName(plan.front_policy));
  json["slots"] = plan.slice != 0 && plan.front_policy == FrontPolicy::kDp
                      ? nlohmann::ordered_json(plan.slots)
                      : nlohmann::ordered_json(nullptr);
  json["resync_every"] = plan.slice != 0 && plan.front_policy == FrontPolicy::kResync
                             ? nlohmann::ordered_json(plan.resync_every)
                             : nlohmann::ordered_json(nullptr);
  json["recompute"] = std::string(performer::LayerRecomputeName(plan.recompute));
  json["copy_forward_weights"] = plan.copy_forward_weights;
  json["bf16_products"] = plan.bf16_products;
  json["predicted_peak_bytes"] = plan.predicted_peak_bytes;
  json["predicted_time_s"] = plan.predicted_time_s;
  return json;
}

nlohmann::ordered_json ModelConfigToJson(const performer::ModelConfig& model) {
  nlohmann::ordered_json json;
  json["vocab"] = model.vocab;
  json["d_model"] = model.d_model;
  json["layers"] = model.layers;
  json["heads"] = model.heads;
  json["d_ff"] = model.d_ff;
  json["features"] = std::string(performer::FeatureMapName(model.feature_map));
  json["feature_multiplier"] = model.feature_multiplier;
  json["ln"] = std::string(performer::LayerNormPlacementName(model.layernorm));
  json["parameters"] = model.parameter_count();
  return json;
}

nlohmann::ordered_json BaselineRowsToJson(absl::Span<const planner::BaselineRow> rows) {
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  for (const planner::BaselineRow& row : rows) {
    nlohmann::ordered_json entry;
    entry["layout"] = std::string(planner::AttentionLayoutName(row.layout));
    entry["recompute"] = std::string(planner::RecomputeName(row.recompute));
    entry["activation_bytes"] = row.activation_bytes;
    entry["kept_bytes_per_layer"] = row.kept_bytes_per_layer;
    entry["recomputed_bytes_per_layer"] = row.recomputed_bytes_per_layer;
    entry["model_state_bytes"] = row.model_state_bytes;
    entry["total_bytes"] = row.total_bytes;
    entry["compute_overhead_fraction"] = row.compute_overhead_fraction;
    json.push_back(std::move(entry));
  }
  return json;
}

}  // namespace slimfit::client
