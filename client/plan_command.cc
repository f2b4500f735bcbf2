#include "client/plan_command.h"

#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/files.h"
#include "base/flags.h"
#include "client/json_output.h"
#include "client/transformer_plan_command.h"
#include "nlohmann/json.hpp"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "planner/cost_model.h"
#include "planner/device_profile.h"
#include "planner/device_profile_io.h"
#include "planner/plan_chart.h"
#include "planner/plan_request_builder.h"
#include "planner/plan_search.h"
#include "planner/transformer_baselines.h"

namespace slimfit::client {
namespace {

using performer::FrontPolicy;
using performer::Plan;
using performer::PrefixMode;
using planner::FormatBytes;
using planner::PlanCandidate;
using planner::PlanSearchResult;

struct PerformerPlanOptions {
  std::string arch = "performer";
  performer::ModelConfig model;  // numeric fields filled by flags directly
  std::string features;
  std::string ln;
  int64_t seq_len = 0;
  int64_t documents = 1;
  int64_t memory_budget = 0;
  std::string profile;
  std::string device;
  int64_t threads = 1;
  std::string objective = "time";
  std::string dtype = "float32";
  bool bf16_products = false;
  std::string optimizer = "none";
  double safety_margin = 0.10;
  bool json = false;
  std::string svg;  // --svg: also draw the search as an SVG chart here
};

// The device profile and where it came from.
struct ProfileSource {
  planner::DeviceProfile profile;
  bool calibrated = false;
  std::string path;  // --profile
};

// The softmax transformer of the same width, depth and heads on one sequence of seq_len tokens,
// at the Performer's element size, without dropout (the Performer has none), with the same
// optimizer choice. Absent (with a note) when the shape is beyond the baselines' bounds.
struct SoftmaxBaseline {
  int bytes_per_element = 4;
  std::vector<planner::BaselineRow> rows;
  std::string unavailable_reason;
};

// The value of --arch in `args` ("performer" when absent), without parsing anything else: the
// architecture decides which flags are valid. Both "--arch=X" and "--arch X".
std::string PeekArch(absl::Span<const std::string> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (absl::StartsWith(args[i], "--arch=")) return args[i].substr(7);
    if (args[i] == "--arch" && i + 1 < args.size()) return args[i + 1];
  }
  return "performer";
}

std::string DescribePrefix(const Plan& plan) {
  return plan.prefix_mode == PrefixMode::kChunked ? absl::StrCat("chunked/", plan.block) : "cumsum";
}

std::string DescribeFront(const Plan& plan) {
  if (plan.slice == 0) return "-";
  switch (plan.front_policy) {
    case FrontPolicy::kResync:
      return absl::StrCat("resync/", plan.resync_every);
    case FrontPolicy::kDp:
      return absl::StrCat("dp ", performer::ScheduleKindName(plan.schedule), "/", plan.slots);
    default:
      return std::string(performer::FrontPolicyName(plan.front_policy));
  }
}

std::string Seconds(double seconds) { return absl::StrFormat("%.3g s", seconds); }

absl::StatusOr<ProfileSource> LoadProfile(const PerformerPlanOptions& options, performer::DType dtype,
                                          bool threads_set, const DeviceCalibrator& calibrate) {
  const bool has_profile = !options.profile.empty();
  const bool has_device = !options.device.empty();
  if (has_profile == has_device) {
    return absl::InvalidArgumentError(has_profile
                                          ? "give either --profile=FILE or --device, not both"
                                          : "give --profile=FILE (from 'slimfit calibrate --out=FILE') or "
                                            "--device=cpu to calibrate now");
  }
  ProfileSource source;
  if (has_profile) {
    if (threads_set) {
      return absl::InvalidArgumentError(
          "--threads applies to --device (calibration); a --profile was measured with its own "
          "thread count");
    }
    absl::StatusOr<planner::DeviceProfile> profile = planner::ReadDeviceProfile(options.profile);
    if (!profile.ok()) return profile.status();
    source.profile = *std::move(profile);
    source.path = options.profile;
    return source;
  }
  if (options.threads < 1 || options.threads > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", options.threads, ": expected 1 to 4096"));
  }
  CalibrationRequest request;
  request.device = options.device;
  request.threads = static_cast<int>(options.threads);
  request.dtype = dtype;
  absl::StatusOr<CalibrationOutcome> outcome = calibrate(request);
  if (!outcome.ok()) return outcome.status();
  source.profile = outcome->profile;
  source.calibrated = true;
  return source;
}

SoftmaxBaseline ComputeSoftmaxBaseline(const performer::ModelConfig& model, int64_t seq_len,
                                       performer::DType dtype, bool adam) {
  planner::BaselineWorkload workload;
  workload.shape.d_model = model.d_model;
  workload.shape.layers = model.layers;
  workload.shape.heads = model.heads;
  workload.shape.d_ff = model.d_ff;
  workload.shape.vocab_size = model.vocab;
  workload.shape.bytes_per_element = static_cast<int>(performer::DTypeBytes(dtype));
  workload.shape.dropout = false;
  workload.batch = planner::BatchSpec::Explicit({seq_len});
  workload.state.parameter_bytes_per_element = static_cast<int>(performer::DTypeBytes(dtype));
  workload.state.adam = adam;
  SoftmaxBaseline baseline;
  baseline.bytes_per_element = workload.shape.bytes_per_element;
  absl::StatusOr<std::vector<planner::BaselineRow>> rows = planner::ComputeBaselines(workload);
  if (rows.ok()) {
    baseline.rows = *std::move(rows);
  } else {
    baseline.unavailable_reason = std::string(rows.status().message());
  }
  return baseline;
}

std::string FrontierTable(const PlanSearchResult& result, double usable_bytes) {
  constexpr absl::string_view kFormat = "%1s %7s  %-12s %-12s %-9s %-7s %10s %10s  %s\n";
  std::string table = absl::StrFormat(kFormat, "", "slice", "prefix", "front", "recompute", "weights", "peak",
                                      "time", "fits");
  for (const PlanCandidate& candidate : result.frontier) {
    const Plan& plan = candidate.plan;
    const bool chosen = plan.DebugString() == result.chosen.plan.DebugString();
    absl::StrAppendFormat(
        &table, kFormat, chosen ? "*" : "", plan.slice == 0 ? "full" : absl::StrCat(plan.slice),
        DescribePrefix(plan), DescribeFront(plan), performer::LayerRecomputeName(plan.recompute),
        plan.copy_forward_weights ? "copies" : "one",
        FormatBytes(static_cast<double>(plan.predicted_peak_bytes)), Seconds(plan.predicted_time_s),
        static_cast<double>(plan.predicted_peak_bytes) <= usable_bytes ? "yes" : "no");
  }
  return table;
}

std::string FormatText(const PerformerPlanOptions& options, const performer::ModelConfig& model,
                       const ProfileSource& source, const PlanSearchResult& result,
                       const SoftmaxBaseline& softmax, int64_t budget) {
  std::string text;
  auto line = [&text](absl::string_view label, const std::string& value) {
    absl::StrAppendFormat(&text, "%-17s%s\n", label, value);
  };
  line("model", absl::StrFormat("Performer: d_model %d, %d layers, %d heads, d_ff %d, %s features "
                                "(M = %d per head), %s-LN, vocab %d; %.2f M parameters",
                                model.d_model, model.layers, model.heads, model.d_ff,
                                performer::FeatureMapName(model.feature_map), model.features_per_head(),
                                performer::LayerNormPlacementName(model.layernorm), model.vocab,
                                static_cast<double>(model.parameter_count()) / 1e6));
  line("workload",
       absl::StrFormat("%d tokens in %d document%s, %s, %s", options.seq_len, options.documents,
                       options.documents == 1 ? "" : "s", options.dtype,
                       options.optimizer == "adam" ? "Adam state on the device" : "no optimizer state"));
  const planner::DeviceProfile& p = source.profile;
  line("device",
       absl::StrFormat("%s%s, %d thread%s; %s", p.device,
                       p.device_name.empty() ? "" : absl::StrCat(" (", p.device_name, ")"), p.threads,
                       p.threads == 1 ? "" : "s",
                       source.calibrated ? "calibrated now" : absl::StrCat("profile ", source.path)));
  const double usable = static_cast<double>(budget) * (1 - options.safety_margin);
  line("budget", absl::StrFormat("%s (%s usable with a %.0f%% margin), objective %s",
                                 FormatBytes(static_cast<double>(budget)), FormatBytes(usable),
                                 100 * options.safety_margin, options.objective));

  const Plan& chosen = result.chosen.plan;
  absl::StrAppend(&text, "\nchosen plan\n");
  auto field = [&text](absl::string_view label, const std::string& value) {
    absl::StrAppendFormat(&text, "  %-17s%s\n", label, value);
  };
  field("slice C",
        chosen.slice == 0 ? "full back-propagation (no slicing)" : absl::StrCat(chosen.slice, " tokens"));
  field("prefix mode", chosen.prefix_mode == PrefixMode::kChunked
                           ? absl::StrCat("chunked, block ", chosen.block)
                           : std::string("cumsum"));
  field("front policy", chosen.slice == 0 ? std::string("-")
                        : chosen.front_policy == FrontPolicy::kDp
                            ? absl::StrCat("dp (", performer::ScheduleKindName(chosen.schedule), " program)")
                            : std::string(performer::FrontPolicyName(chosen.front_policy)));
  field("slots", chosen.slice != 0 && chosen.front_policy == FrontPolicy::kDp ? absl::StrCat(chosen.slots)
                                                                              : std::string("-"));
  field("resync every", chosen.slice != 0 && chosen.front_policy == FrontPolicy::kResync
                            ? absl::StrCat(chosen.resync_every, " slices")
                            : std::string("-"));
  field("recompute", chosen.recompute == performer::LayerRecompute::kLayers
                         ? "layers (only each layer's input is kept; the layer is "
                           "recomputed during its backward)"
                         : "none (every activation of the slice graph is kept)");
  const char* weights = "one layout (this device's engine makes no forward copies of these weights)";
  if (chosen.bf16_products) {
    weights = "bfloat16 copies (every linear weight rounded once per call for the bfloat16 products)";
  } else if (planner::ForwardCopiesApply(source.profile, chosen.dtype, /*bf16_products=*/false)) {
    weights = chosen.copy_forward_weights
                  ? "copies (the FFN and output weights also kept contiguous for the forward products)"
                  : "one layout (no forward copies: less memory, about 1.15x the time)";
  }
  field("weights", weights);
  field("predicted peak", FormatBytes(static_cast<double>(chosen.predicted_peak_bytes)));
  field("predicted time", Seconds(chosen.predicted_time_s));
  field("reason", result.reason);

  absl::StrAppendFormat(&text,
                        "\nPareto frontier: %d plans of %d candidates (* chosen; fits: predicted "
                        "peak within the usable budget)\n",
                        result.frontier.size(), result.candidates_considered);
  absl::StrAppend(&text, FrontierTable(result, usable));

  absl::StrAppend(&text, "\nbaselines\n");
  const Plan& full = result.full_backprop.plan;
  absl::StrAppendFormat(&text, "  full back-propagation of this Performer: peak %s, time %s (%s)\n",
                        FormatBytes(static_cast<double>(full.predicted_peak_bytes)),
                        Seconds(full.predicted_time_s),
                        static_cast<double>(full.predicted_peak_bytes) <= usable ? "fits the budget"
                                                                                 : "does not fit the budget");
  absl::StrAppendFormat(&text,
                        "  softmax transformer of the same width, depth and heads on one sequence "
                        "of %d tokens (%s, no dropout):\n",
                        options.seq_len, options.dtype);
  if (softmax.rows.empty()) {
    absl::StrAppend(&text, "    unavailable: ", softmax.unavailable_reason, "\n");
  } else {
    const std::string table = planner::FormatBaselineTable(softmax.rows);
    absl::StrAppend(&text, "    ", absl::StrReplaceAll(table, {{"\n", "\n    "}}));
    text.resize(text.size() - 4);  // the indent after the table's last line break
  }
  return text;
}

nlohmann::ordered_json ToJson(const PerformerPlanOptions& options, const performer::ModelConfig& model,
                              const ProfileSource& source, const PlanSearchResult& result,
                              const SoftmaxBaseline& softmax, int64_t budget) {
  nlohmann::ordered_json json;
  json["arch"] = "performer";
  json["model"] = ModelConfigToJson(model);
  nlohmann::ordered_json& workload = json["workload"];
  workload["seq_len"] = options.seq_len;
  workload["documents"] = options.documents;
  workload["dtype"] = options.dtype;
  workload["optimizer"] = options.optimizer;
  nlohmann::ordered_json& device = json["device"];
  device["source"] = source.calibrated ? "calibrated" : "profile";
  if (!source.calibrated) device["path"] = source.path;
  device["profile"] = DeviceProfileToJson(source.profile);
  json["objective"] = options.objective;
  json["memory_budget_bytes"] = budget;
  json["safety_margin"] = options.safety_margin;
  json["chosen"] = PlanToJson(result.chosen.plan);
  json["reason"] = result.reason;
  nlohmann::ordered_json frontier = nlohmann::ordered_json::array();
  for (const PlanCandidate& candidate : result.frontier) frontier.push_back(PlanToJson(candidate.plan));
  json["frontier"] = std::move(frontier);
  json["candidates_considered"] = result.candidates_considered;
  nlohmann::ordered_json& baselines = json["baselines"];
  baselines["full_backprop"] = PlanToJson(result.full_backprop.plan);
  nlohmann::ordered_json& transformer = baselines["softmax_transformer"];
  transformer["batch"] = 1;
  transformer["seq_len"] = options.seq_len;
  transformer["bytes_per_element"] = softmax.bytes_per_element;
  transformer["dropout"] = false;
  if (softmax.rows.empty()) {
    transformer["rows"] = nullptr;
    transformer["unavailable_reason"] = softmax.unavailable_reason;
  } else {
    transformer["rows"] = BaselineRowsToJson(softmax.rows);
  }
  return json;
}

absl::Status RunPerformerPlan(absl::Span<const std::string> args, std::ostream& out,
                              const DeviceCalibrator& calibrate) {
  PerformerPlanOptions options;
  options.features = std::string(performer::FeatureMapName(options.model.feature_map));
  options.ln = std::string(performer::LayerNormPlacementName(options.model.layernorm));
  options.threads = std::max(1u, std::thread::hardware_concurrency());
  performer::ModelConfig& model = options.model;
  base::FlagSet flags(
      "plan",
      "slimfit plan --seq_len=L --memory_budget=SIZE (--profile=FILE | --device=cpu [--threads=N])\n"
      "           [model flags] [--documents=D] [--objective=time|memory] [--dtype=float32]\n"
      "           [--optimizer=none|adam] [--json]\n"
      "       slimfit plan --arch=transformer ... (see 'slimfit plan --arch=transformer --help')\n"
      "       slimfit plan (--worker=ID | --all) ... (the coordinator's plans for registered workers;\n"
      "           see 'slimfit plan --all --help')",
      "The plan (slice size C, prefix mode, front policy, ...) that computes the exact gradient of\n"
      "a causal Performer on L tokens fastest (or in the least memory) within the budget, its\n"
      "predicted peak memory and time, the Pareto frontier it was chosen from, and what ordinary\n"
      "back-propagation and a softmax transformer of the same shape would need. The device's\n"
      "speed comes from --profile (written by 'slimfit calibrate --out') or is measured now with\n"
      "--device.");
  flags.String("arch", &options.arch, "performer, or transformer for softmax baselines alone");
  flags.Int("d_model", &model.d_model, "model width (divisible by 4 and by --heads)");
  flags.Int("layers", &model.layers, "layers");
  flags.Int("heads", &model.heads, "attention heads");
  flags.Int("d_ff", &model.d_ff, "feed-forward width");
  flags.Int("vocab", &model.vocab, "vocabulary size");
  flags.String("features", &options.features, "feature map: relu, elu+1, sqr or favor+");
  flags.Int("feature_multiplier", &model.feature_multiplier,
            "favor+: features per head in multiples of the head width");
  flags.String("ln", &options.ln, "LayerNorm after (post) or before (pre) each sub-layer");
  flags.Int("seq_len", &options.seq_len, "tokens L in the packed sequence", base::FlagSet::kRequired);
  flags.Int("documents", &options.documents, "documents packed into the L tokens");
  flags.ByteSize("memory_budget", &options.memory_budget,
                 "device memory for the gradient, e.g. 512MiB, 2GiB, 1.5GB (default: the "
                 "device's total memory from its profile)");
  flags.String("profile", &options.profile, "device profile file (text-format slimfit.v1.DeviceProfile)");
  flags.String("device", &options.device, "calibrate this device now instead: cpu, cuda:0");
  flags.Int("threads", &options.threads,
            "--device: compute threads to calibrate with (default: the cores available)",
            base::FlagSet::kOptionalNoDefault);
  flags.String("objective", &options.objective, "time (fastest plan that fits) or memory (least peak)");
  flags.String("dtype", &options.dtype, "float32 or float64");
  flags.Bool("bf16_products", &options.bf16_products,
             "plans with bfloat16 products (float32 only): their bfloat16 copies in memory, the profile's "
             "bfloat16 constants (bf16_flops_per_second, ...) in time");
  flags.String("optimizer", &options.optimizer,
               "none (the coordinator steps the optimizer) or adam (two moments on the device)");
  flags.Double("safety_margin", &options.safety_margin,
               "fraction of the budget kept free: predicted peaks stay under (1 - margin) * budget");
  flags.Bool("json", &options.json, "print one JSON object instead of tables");
  flags.String("svg", &options.svg,
               "also write an SVG chart of the search: every candidate's predicted peak and time, the "
               "Pareto frontier, the chosen plan, full back-propagation and the budget");
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help_requested()) {
    out << flags.Help();
    return absl::OkStatus();
  }

  auto with_flag = [](absl::string_view flag, const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat("--", flag, ": ", status.message()));
  };
  absl::StatusOr<performer::FeatureMap> feature_map = performer::ParseFeatureMap(options.features);
  if (!feature_map.ok()) return with_flag("features", feature_map.status());
  model.feature_map = *feature_map;
  absl::StatusOr<performer::LayerNormPlacement> ln = performer::ParseLayerNormPlacement(options.ln);
  if (!ln.ok()) return with_flag("ln", ln.status());
  model.layernorm = *ln;
  if (absl::Status valid = model.Validate(); !valid.ok()) return valid;
  absl::StatusOr<performer::DType> dtype = performer::ParseDType(options.dtype);
  if (!dtype.ok()) return with_flag("dtype", dtype.status());
  options.dtype = std::string(performer::DTypeName(*dtype));
  absl::StatusOr<planner::Objective> objective = planner::ParseObjective(options.objective);
  if (!objective.ok()) return with_flag("objective", objective.status());
  if (options.optimizer != "none" && options.optimizer != "adam") {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer=", options.optimizer, ": expected none or adam"));
  }
  // Checked before the profile is loaded (which may calibrate the device); the budget is the
  // profile's memory when not given.
  planner::PlanRequestInputs inputs;
  inputs.model = model;
  inputs.sequence_length = options.seq_len;
  inputs.documents = options.documents;
  inputs.optimizer_bytes_per_parameter = options.optimizer == "adam" ? 2 * performer::DTypeBytes(*dtype) : 0;
  if (flags.IsSet("memory_budget")) inputs.memory_budget_bytes = options.memory_budget;
  inputs.objective = *objective;
  inputs.dtype = *dtype;
  inputs.bf16_products = options.bf16_products;
  inputs.safety_margin = options.safety_margin;
  planner::PlanRequestFields fields;
  fields.sequence_length = "--seq_len";
  fields.documents = "--documents";
  fields.memory_budget_bytes = "--memory_budget";
  fields.safety_margin = "--safety_margin";
  fields.bf16_products = "--bf16_products";
  absl::StatusOr<planner::PlanSearchRequest> request = planner::BuildPlanSearchRequest(inputs, fields);
  if (!request.ok()) return request.status();

  absl::StatusOr<ProfileSource> source = LoadProfile(options, *dtype, flags.IsSet("threads"), calibrate);
  if (!source.ok()) return source.status();
  int64_t budget = options.memory_budget;
  if (!flags.IsSet("memory_budget")) {
    if (source->profile.total_memory_bytes <= 0) {
      return absl::InvalidArgumentError(
          "--memory_budget is required: the device profile does not say how much memory the "
          "device has");
    }
    budget = source->profile.total_memory_bytes;
  }

  request->memory_budget_bytes = budget;
  absl::StatusOr<PlanSearchResult> result = planner::SearchPlans(*request, source->profile);
  if (!result.ok()) {
    if (result.status().code() == absl::StatusCode::kResourceExhausted) {
      return absl::ResourceExhaustedError(absl::StrCat("no plan fits: ", result.status().message()));
    }
    return result.status();
  }
  const SoftmaxBaseline softmax =
      ComputeSoftmaxBaseline(model, options.seq_len, *dtype, options.optimizer == "adam");
  if (!options.svg.empty()) {
    const int64_t usable = static_cast<int64_t>(static_cast<double>(budget) * (1 - options.safety_margin));
    absl::StatusOr<std::string> svg = planner::PlanFrontierSvg(
        *result, budget, usable,
        absl::StrCat(
            "Plans for L = ", options.seq_len, " within ", planner::HumanBytes(static_cast<double>(budget)),
            " (", source->profile.device_name.empty() ? source->profile.device : source->profile.device_name,
            ")"));
    if (!svg.ok()) return with_flag("svg", svg.status());
    if (absl::Status written = base::WriteFileAtomically(options.svg, *svg); !written.ok()) {
      return with_flag("svg", written);
    }
  }
  if (options.json) {
    out << ToJson(options, model, *source, *result, softmax, budget).dump(2) << "\n";
  } else {
    out << FormatText(options, model, *source, *result, softmax, budget);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunPlanCommand(absl::Span<const std::string> args, std::ostream& out,
                            const DeviceCalibrator& calibrate) {
  const std::string arch = PeekArch(args);
  if (arch == "transformer") return RunTransformerPlanCommand(args, out);
  if (arch == "performer") return RunPerformerPlan(args, out, calibrate);
  return absl::InvalidArgumentError(
      absl::StrCat("--arch=", arch, ": expected performer (the default) or transformer"));
}

}  // namespace slimfit::client
