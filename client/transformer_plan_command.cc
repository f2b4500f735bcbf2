#include "client/transformer_plan_command.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "client/json_output.h"
#include "nlohmann/json.hpp"
#include "planner/transformer_baselines.h"

namespace slimfit::client {
namespace {

using planner::BaselineRow;
using planner::BaselineWorkload;
using planner::BatchMoments;
using planner::BatchSpec;

struct TransformerPlanOptions {
  std::string arch = "transformer";
  int64_t d_model = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t d_ff = 0;
  int64_t vocab = 0;
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::string length_distribution = "uniform";
  int64_t bytes_per_element = 2;
  int64_t parameter_bytes_per_element = 4;
  std::string optimizer = "adam";
  bool dropout = true;
  bool json = false;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error_number = errno;
    return absl::ErrnoToStatus(error_number, absl::StrCat("cannot open lengths file ", path));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read lengths file ", path));
  return contents.str();
}

// An int flag that must fit an int (bytes per element).
absl::StatusOr<int> SmallInt(absl::string_view flag, int64_t value) {
  if (value < 0 || value > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": expected 1, 2, 4 or 8"));
  }
  return static_cast<int>(value);
}

}  // namespace

absl::Status RunTransformerPlanCommand(absl::Span<const std::string> args, std::ostream& out) {
  TransformerPlanOptions options;
  base::FlagSet flags(
      "plan --arch=transformer",
      "slimfit plan --arch=transformer --d_model=H --layers=N --heads=A [--d_ff=F] [--vocab=V]\n"
      "           (--batch=B --seq_len=L | --length_distribution=FILE) [--bytes_per_element=2] "
      "[--json]",
      "Memory needed to train an ordinary softmax transformer on one batch: naive, FlashAttention\n"
      "and padding-free layouts, each with no, attention, feed-forward or full recomputation.\n"
      "--length_distribution=uniform (default): B sequences with lengths uniform in 1..L\n"
      "(expected values). --length_distribution=FILE: the lengths, one per line.");
  flags.String("arch", &options.arch,
               "model family: transformer here (performer: see 'slimfit plan --help')");
  flags.Int("d_model", &options.d_model, "model width h", base::FlagSet::kRequired);
  flags.Int("layers", &options.layers, "layers", base::FlagSet::kRequired);
  flags.Int("heads", &options.heads, "attention heads a (must divide d_model)", base::FlagSet::kRequired);
  flags.Int("d_ff", &options.d_ff, "feed-forward width f; 0 means 4 * d_model");
  flags.Int("vocab", &options.vocab, "vocabulary size; 0 leaves the embedding out of the model state");
  flags.Int("batch", &options.batch, "uniform: sequences per batch B");
  flags.Int("seq_len", &options.seq_len, "uniform: longest sequence length L");
  flags.String("length_distribution", &options.length_distribution,
               "uniform, or a file with one sequence length per line");
  flags.Int("bytes_per_element", &options.bytes_per_element,
            "bytes per activation element: 1, 2 (bf16/fp16), 4 or 8");
  flags.Int("parameter_bytes_per_element", &options.parameter_bytes_per_element,
            "bytes per parameter and per gradient element: 1, 2, 4 or 8");
  flags.String("optimizer", &options.optimizer, "adam (two fp32 moments, 8 bytes per parameter) or none");
  flags.Bool("dropout", &options.dropout,
             "dropout masks are cached, 1 byte per element (--nodropout: no dropout)");
  flags.Bool("json", &options.json, "print one JSON object instead of a table");
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help_requested()) {
    out << flags.Help();
    return absl::OkStatus();
  }
  if (options.arch != "transformer") {
    return absl::InvalidArgumentError(
        absl::StrCat("--arch=", options.arch, " reached the transformer planner"));
  }
  if (options.optimizer != "adam" && options.optimizer != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer=", options.optimizer, ": expected adam or none"));
  }

  BaselineWorkload workload;
  workload.shape.d_model = options.d_model;
  workload.shape.layers = options.layers;
  workload.shape.heads = options.heads;
  workload.shape.d_ff = options.d_ff;
  workload.shape.vocab_size = options.vocab;
  absl::StatusOr<int> bytes = SmallInt("bytes_per_element", options.bytes_per_element);
  if (!bytes.ok()) return bytes.status();
  workload.shape.bytes_per_element = *bytes;
  workload.shape.dropout = options.dropout;
  absl::StatusOr<int> parameter_bytes =
      SmallInt("parameter_bytes_per_element", options.parameter_bytes_per_element);
  if (!parameter_bytes.ok()) return parameter_bytes.status();
  workload.state.parameter_bytes_per_element = *parameter_bytes;
  workload.state.adam = options.optimizer == "adam";

  const bool uniform = options.length_distribution == "uniform";
  if (uniform) {
    if (!flags.IsSet("batch") || !flags.IsSet("seq_len")) {
      return absl::InvalidArgumentError(
          "--length_distribution=uniform needs --batch=B and --seq_len=L (or give "
          "--length_distribution=FILE with one length per line)");
    }
    workload.batch = BatchSpec::Uniform(options.seq_len, options.batch);
  } else {
    if (flags.IsSet("batch") || flags.IsSet("seq_len")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--batch and --seq_len describe a uniform batch; with --length_distribution=",
                       options.length_distribution, " the file gives the lengths"));
    }
    if (options.length_distribution.empty()) {
      return absl::InvalidArgumentError("--length_distribution is empty; expected uniform or a file");
    }
    absl::StatusOr<std::string> contents = ReadFile(options.length_distribution);
    if (!contents.ok()) return contents.status();
    absl::StatusOr<std::vector<int64_t>> lengths = planner::ParseLengthsFile(*contents);
    if (!lengths.ok()) {
      return absl::Status(lengths.status().code(),
                          absl::StrCat(options.length_distribution, ": ", lengths.status().message()));
    }
    workload.batch = BatchSpec::Explicit(*std::move(lengths));
  }

  absl::StatusOr<std::vector<BaselineRow>> rows = planner::ComputeBaselines(workload);
  if (!rows.ok()) return rows.status();
  absl::StatusOr<BatchMoments> moments = planner::ComputeBatchMoments(workload.batch);
  if (!moments.ok()) return moments.status();
  absl::StatusOr<planner::ModelStateBytes> state = planner::ComputeModelState(workload.shape, workload.state);
  if (!state.ok()) return state.status();
  const int64_t d_ff = planner::EffectiveFeedForwardWidth(workload.shape);

  if (options.json) {
    nlohmann::ordered_json json;
    json["arch"] = "transformer";
    nlohmann::ordered_json& model = json["model"];
    model["d_model"] = options.d_model;
    model["layers"] = options.layers;
    model["heads"] = options.heads;
    model["d_ff"] = d_ff;
    model["vocab"] = options.vocab;
    model["parameters"] = state->parameters;
    nlohmann::ordered_json& batch = json["batch"];
    batch["distribution"] = uniform ? "uniform" : "file";
    if (!uniform) batch["path"] = options.length_distribution;
    batch["sequences"] = moments->sequences;
    batch["max_length"] = moments->max_length;
    batch["max_length_squared"] = moments->max_length_squared;
    batch["tokens"] = moments->tokens;
    batch["sum_squared_lengths"] = moments->sum_squared_lengths;
    json["bytes_per_element"] = workload.shape.bytes_per_element;
    json["parameter_bytes_per_element"] = workload.state.parameter_bytes_per_element;
    json["optimizer"] = options.optimizer;
    json["dropout"] = options.dropout;
    json["baselines"] = BaselineRowsToJson(*rows);
    out << json.dump(2) << "\n";
    return absl::OkStatus();
  }

  std::string text;
  absl::StrAppendFormat(&text, "%-21s%s\n", "softmax transformer",
                        absl::StrFormat("d_model %d, %d layers, %d heads, d_ff %d, vocab %d; "
                                        "%.1f M parameters",
                                        options.d_model, options.layers, options.heads, d_ff, options.vocab,
                                        state->parameters / 1e6));
  const std::string batch =
      uniform ? absl::StrFormat(
                    "%d sequences, lengths uniform in 1..%d: expected longest %.1f, "
                    "expected tokens %.1f",
                    options.batch, options.seq_len, moments->max_length, moments->tokens)
              : absl::StrFormat("%.0f sequences from %s: longest %.0f, %.0f tokens", moments->sequences,
                                options.length_distribution, moments->max_length, moments->tokens);
  absl::StrAppendFormat(&text, "%-21s%s\n", "batch", batch);
  absl::StrAppendFormat(
      &text, "%-21s%s\n", "precision",
      absl::StrFormat("activations %d bytes/element%s; parameters and gradients %d bytes%s",
                      workload.shape.bytes_per_element,
                      options.dropout ? " + 1-byte dropout masks" : ", no dropout",
                      workload.state.parameter_bytes_per_element,
                      workload.state.adam ? ", Adam 8 bytes per parameter" : ", no optimizer state"));
  absl::StrAppend(&text, "\n", planner::FormatBaselineTable(*rows));
  out << text;
  return absl::OkStatus();
}

}  // namespace slimfit::client
