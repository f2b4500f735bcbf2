#include "planner/transformer_baselines.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"

namespace slimfit::planner {
namespace {

constexpr AttentionLayout kLayouts[] = {AttentionLayout::kNaive, AttentionLayout::kFlash,
                                        AttentionLayout::kPaddingFree};
constexpr Recompute kRecomputes[] = {Recompute::kNone, Recompute::kAttention, Recompute::kFeedForward,
                                     Recompute::kFull};

bool IsSupportedElementSize(int bytes) { return bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8; }

absl::Status CheckRange(absl::string_view name, int64_t value, int64_t low, int64_t high,
                        absl::string_view hint = "") {
  if (value >= low && value <= high) return absl::OkStatus();
  if (value < low) {
    return absl::InvalidArgumentError(
        low == 1 ? absl::StrCat(name, " must be positive, got ", value, hint)
                 : absl::StrCat(name, " must be at least ", low, ", got ", value, hint));
  }
  return absl::InvalidArgumentError(absl::StrCat(name, " must be at most ", high, ", got ", value));
}

absl::Status CheckLayout(AttentionLayout layout) {
  for (AttentionLayout known : kLayouts) {
    if (layout == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown attention layout ", static_cast<int>(layout),
                                                 "; expected naive, flash or padding-free"));
}

// Tokens every token-wise operation of the layer runs on: padded or real.
double LinearTokens(const BatchMoments& moments, AttentionLayout layout) {
  return layout == AttentionLayout::kPaddingFree ? moments.tokens : moments.sequences * moments.max_length;
}

}  // namespace

absl::string_view AttentionLayoutName(AttentionLayout layout) {
  switch (layout) {
    case AttentionLayout::kNaive:
      return "naive";
    case AttentionLayout::kFlash:
      return "flash";
    case AttentionLayout::kPaddingFree:
      return "padding-free";
  }
  return "unknown";
}

absl::string_view RecomputeName(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kAttention:
      return "attention";
    case Recompute::kFeedForward:
      return "feed-forward";
    case Recompute::kFull:
      return "full";
  }
  return "unknown";
}

absl::Status ValidateTransformerShape(const TransformerShape& shape) {
  if (absl::Status s = CheckRange("d_model", shape.d_model, 1, kMaxBaselineWidth); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange("layers", shape.layers, 1, kMaxBaselineLayers); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange("heads", shape.heads, 1, kMaxBaselineWidth); !s.ok()) {
    return s;
  }
  if (shape.d_model % shape.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("d_model (", shape.d_model,
                                                   ") must be divisible by heads (", shape.heads,
                                                   "); head dimension would not be an integer"));
  }
  if (absl::Status s = CheckRange("d_ff", shape.d_ff, 0, 4 * kMaxBaselineWidth, " (0 selects 4·d_model)");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckRange("vocab_size", shape.vocab_size, 0, kMaxBaselineVocab, " (0 leaves the embedding out)");
      !s.ok()) {
    return s;
  }
  if (!IsSupportedElementSize(shape.bytes_per_element)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes_per_element must be 1, 2, 4 or 8, got ", shape.bytes_per_element));
  }
  return absl::OkStatus();
}

int64_t EffectiveFeedForwardWidth(const TransformerShape& shape) {
  return shape.d_ff == 0 ? 4 * shape.d_model : shape.d_ff;
}

BatchSpec BatchSpec::Uniform(int64_t max_length, int64_t batch_size) {
  BatchSpec spec;
  spec.kind = Kind::kUniform;
  spec.max_length = max_length;
  spec.batch_size = batch_size;
  return spec;
}

BatchSpec BatchSpec::Explicit(std::vector<int64_t> lengths) {
  BatchSpec spec;
  spec.kind = Kind::kExplicit;
  spec.lengths = std::move(lengths);
  return spec;
}

absl::Status ValidateBatchSpec(const BatchSpec& batch) {
  switch (batch.kind) {
    case BatchSpec::Kind::kUniform:
      if (absl::Status s =
              CheckRange("uniform max_length L", batch.max_length, 1, kMaxBaselineSequenceLength);
          !s.ok()) {
        return s;
      }
      return CheckRange("uniform batch_size b", batch.batch_size, 1, kMaxBaselineBatchSize);
    case BatchSpec::Kind::kExplicit:
      if (batch.lengths.empty()) {
        return absl::InvalidArgumentError("explicit batch has no sequence lengths; give at least one");
      }
      for (size_t i = 0; i < batch.lengths.size(); ++i) {
        if (absl::Status s =
                CheckRange(absl::StrCat("lengths[", i, "]"), batch.lengths[i], 1, kMaxBaselineSequenceLength);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown batch kind ", static_cast<int>(batch.kind)));
}

absl::StatusOr<BatchMoments> ComputeBatchMoments(const BatchSpec& batch) {
  if (absl::Status s = ValidateBatchSpec(batch); !s.ok()) return s;
  BatchMoments moments;
  if (batch.kind == BatchSpec::Kind::kExplicit) {
    int64_t max_length = 0;
    int64_t tokens = 0;           // ≤ size · 2^24: no overflow for any vector that fits memory
    long double sum_squares = 0;  // may pass 2^63 for huge lists; rounding is then negligible
    for (int64_t length : batch.lengths) {
      if (length > max_length) max_length = length;
      tokens += length;
      sum_squares += static_cast<long double>(length) * static_cast<long double>(length);
    }
    moments.sequences = static_cast<double>(batch.lengths.size());
    moments.max_length = static_cast<double>(max_length);
    moments.max_length_squared = static_cast<double>(max_length) * static_cast<double>(max_length);
    moments.tokens = static_cast<double>(tokens);
    moments.sum_squared_lengths = static_cast<double>(sum_squares);
    return moments;
  }
  // Uniform: tail sums over P(K > k) = 1 − (k/L)^b, k = 0..L−1 (see the header).
  const long double length = static_cast<long double>(batch.max_length);
  const long double b = static_cast<long double>(batch.batch_size);
  const double inverse_length = 1.0 / static_cast<double>(batch.max_length);
  const double exponent = static_cast<double>(batch.batch_size);
  long double expected_max = 0;
  long double expected_max_squared = 0;
  for (int64_t k = 0; k < batch.max_length; ++k) {
    const long double tail =
        1.0L - static_cast<long double>(std::pow(static_cast<double>(k) * inverse_length, exponent));
    expected_max += tail;
    expected_max_squared += static_cast<long double>(2 * k + 1) * tail;
  }
  moments.sequences = static_cast<double>(b);
  moments.max_length = static_cast<double>(expected_max);
  moments.max_length_squared = static_cast<double>(expected_max_squared);
  moments.tokens = static_cast<double>(b * (length + 1) / 2);
  moments.sum_squared_lengths = static_cast<double>(b * (length + 1) * (2 * length + 1) / 6);
  return moments;
}

absl::StatusOr<LayerActivationBytes> ComputeLayerActivations(const TransformerShape& shape,
                                                             const BatchMoments& moments,
                                                             AttentionLayout layout) {
  if (absl::Status s = ValidateTransformerShape(shape); !s.ok()) return s;
  if (absl::Status s = CheckLayout(layout); !s.ok()) return s;
  const double h = static_cast<double>(shape.d_model);
  const double a = static_cast<double>(shape.heads);
  const double f = static_cast<double>(EffectiveFeedForwardWidth(shape));
  const double p = static_cast<double>(shape.bytes_per_element);
  const double mask = shape.dropout ? 1.0 : 0.0;
  const double tokens = LinearTokens(moments, layout);

  LayerActivationBytes bytes;
  bytes.layer_norm = 2 * p * h * tokens;
  bytes.feed_forward = ((p + mask) * h + 2 * p * f) * tokens;
  bytes.layer_input = p * h * tokens;
  const double attention_linear = (5 * p + mask) * h * tokens;
  if (layout == AttentionLayout::kNaive) {
    // Softmax output (+ dropout mask and dropout output): K×K per head and sequence.
    const double per_score = shape.dropout ? 2 * p + 1 : p;
    bytes.attention_quadratic = per_score * a * moments.sequences * moments.max_length_squared;
    bytes.attention = attention_linear + bytes.attention_quadratic;
  } else {
    // the padding-free article's closed form: Σs·(h + 2a) bytes at p = 2, scaled by p/2 (see the header).
    const double flash_state = p / 2 * (h + 2 * a) * moments.tokens;
    bytes.attention = attention_linear + flash_state;
  }
  return bytes;
}

absl::StatusOr<LayerForwardFlops> ComputeLayerForwardFlops(const TransformerShape& shape,
                                                           const BatchMoments& moments,
                                                           AttentionLayout layout) {
  if (absl::Status s = ValidateTransformerShape(shape); !s.ok()) return s;
  if (absl::Status s = CheckLayout(layout); !s.ok()) return s;
  const double h = static_cast<double>(shape.d_model);
  const double f = static_cast<double>(EffectiveFeedForwardWidth(shape));
  const double tokens = LinearTokens(moments, layout);
  const double score_pairs = layout == AttentionLayout::kNaive
                                 ? moments.sequences * moments.max_length_squared
                                 : moments.sum_squared_lengths;
  LayerForwardFlops flops;
  flops.projections = 8 * h * h * tokens;
  flops.scores = 4 * h * score_pairs;
  flops.feed_forward = 4 * h * f * tokens;
  return flops;
}

RecomputeCost ComputeRecomputeCost(const LayerActivationBytes& activations, const LayerForwardFlops& flops,
                                   int64_t layers, Recompute recompute) {
  RecomputeCost cost;
  double recomputed_flops = 0;
  switch (recompute) {
    case Recompute::kNone:
      cost.kept_bytes_per_layer = activations.total();
      break;
    case Recompute::kAttention:
      cost.kept_bytes_per_layer = activations.feed_forward + activations.layer_norm + activations.layer_input;
      cost.recomputed_bytes_per_layer = activations.attention;
      recomputed_flops = flops.attention();
      break;
    case Recompute::kFeedForward:
      cost.kept_bytes_per_layer = activations.attention + activations.layer_norm + activations.layer_input;
      cost.recomputed_bytes_per_layer = activations.feed_forward;
      recomputed_flops = flops.feed_forward;
      break;
    case Recompute::kFull:
      cost.kept_bytes_per_layer = activations.layer_input;
      cost.recomputed_bytes_per_layer = activations.total();
      recomputed_flops = flops.total();
      break;
  }
  cost.activation_bytes =
      static_cast<double>(layers) * cost.kept_bytes_per_layer + cost.recomputed_bytes_per_layer;
  const double step_flops = 3 * flops.total();
  cost.compute_overhead_fraction = step_flops > 0 ? recomputed_flops / step_flops : 0;
  return cost;
}

absl::StatusOr<ModelStateBytes> ComputeModelState(const TransformerShape& shape,
                                                  const ModelStateOptions& options) {
  if (absl::Status s = ValidateTransformerShape(shape); !s.ok()) return s;
  if (!IsSupportedElementSize(options.parameter_bytes_per_element)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter_bytes_per_element must be 1, 2, 4 or 8, got ",
                                                   options.parameter_bytes_per_element));
  }
  // The bounds keep this exact: per layer < 2^44 (4h² ≤ 2^42, 2hf ≤ 2^43), times ≤ 2^16 layers,
  // plus vocab·h ≤ 2^44: below 2^61.
  const int64_t h = shape.d_model;
  const int64_t f = EffectiveFeedForwardWidth(shape);
  const int64_t per_layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h;
  ModelStateBytes state;
  state.parameters = shape.layers * per_layer + shape.vocab_size * h + 2 * h;
  const double parameters = static_cast<double>(state.parameters);
  state.parameter_bytes = parameters * options.parameter_bytes_per_element;
  state.gradient_bytes = state.parameter_bytes;
  state.optimizer_bytes = options.adam ? 8 * parameters : 0;
  return state;
}

absl::StatusOr<std::vector<BaselineRow>> ComputeBaselines(const BaselineWorkload& workload) {
  absl::StatusOr<ModelStateBytes> state = ComputeModelState(workload.shape, workload.state);
  if (!state.ok()) return state.status();
  absl::StatusOr<BatchMoments> moments = ComputeBatchMoments(workload.batch);
  if (!moments.ok()) return moments.status();
  std::vector<BaselineRow> rows;
  rows.reserve(std::size(kLayouts) * std::size(kRecomputes));
  for (AttentionLayout layout : kLayouts) {
    absl::StatusOr<LayerActivationBytes> activations =
        ComputeLayerActivations(workload.shape, *moments, layout);
    if (!activations.ok()) return activations.status();
    absl::StatusOr<LayerForwardFlops> flops = ComputeLayerForwardFlops(workload.shape, *moments, layout);
    if (!flops.ok()) return flops.status();
    for (Recompute recompute : kRecomputes) {
      const RecomputeCost cost = ComputeRecomputeCost(*activations, *flops, workload.shape.layers, recompute);
      BaselineRow row;
      row.layout = layout;
      row.recompute = recompute;
      row.activation_bytes = cost.activation_bytes;
      row.model_state_bytes = state->total();
      row.total_bytes = cost.activation_bytes + row.model_state_bytes;
      row.compute_overhead_fraction = cost.compute_overhead_fraction;
      row.kept_bytes_per_layer = cost.kept_bytes_per_layer;
      row.recomputed_bytes_per_layer = cost.recomputed_bytes_per_layer;
      rows.push_back(row);
    }
  }
  return rows;
}

std::string FormatBytes(double bytes) {
  if (!std::isfinite(bytes) || bytes < 0) return "-";
  if (bytes < 1024) return absl::StrFormat("%.0f B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double scaled = bytes / 1024;
  size_t unit = 0;
  // 1023.95 and above would print as "1024.0": use the next unit instead.
  while (scaled >= 1023.95 && unit + 1 < std::size(kUnits)) {
    scaled /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", scaled, kUnits[unit]);
}

std::string FormatBaselineTable(absl::Span<const BaselineRow> rows) {
  constexpr absl::string_view kFormat = "%-13s %-13s %12s %12s %12s %12s %9s\n";
  std::string table = absl::StrFormat(kFormat, "layout", "recompute", "activations", "kept/layer",
                                      "model state", "total", "overhead");
  for (const BaselineRow& row : rows) {
    absl::StrAppendFormat(&table, kFormat, AttentionLayoutName(row.layout), RecomputeName(row.recompute),
                          FormatBytes(row.activation_bytes), FormatBytes(row.kept_bytes_per_layer),
                          FormatBytes(row.model_state_bytes), FormatBytes(row.total_bytes),
                          absl::StrFormat("+%.1f%%", 100 * row.compute_overhead_fraction));
  }
  return table;
}

absl::StatusOr<std::vector<int64_t>> ParseLengthsFile(absl::string_view contents) {
  std::vector<int64_t> lengths;
  int64_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty()) continue;
    int64_t length = 0;
    if (!absl::SimpleAtoi(text, &length)) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, ": expected one sequence length (an integer), got \"",
                       absl::CHexEscape(text.substr(0, 40)), text.size() > 40 ? "..." : "", "\""));
    }
    if (length < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, ": sequence length must be at least 1, got ", length));
    }
    if (length > kMaxBaselineSequenceLength) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": sequence length ", length,
                                                     " exceeds the maximum of ", kMaxBaselineSequenceLength));
    }
    lengths.push_back(length);
  }
  if (lengths.empty()) {
    return absl::InvalidArgumentError(
        "no sequence lengths found: the file is empty or holds only blank lines");
  }
  return lengths;
}

absl::StatusOr<BatchSpec> ParseBatchSpec(absl::string_view spec) {
  absl::string_view rest = absl::StripAsciiWhitespace(spec);
  constexpr absl::string_view kUsage = "expected \"uniform:L=<max length>,b=<batch size>\"";
  if (!absl::ConsumePrefix(&rest, "uniform:")) {
    return absl::InvalidArgumentError(absl::StrCat("unknown length distribution \"", absl::CHexEscape(spec),
                                                   "\"; ", kUsage,
                                                   " (explicit lengths come from a file, one per line)"));
  }
  int64_t max_length = 0;
  int64_t batch_size = 0;
  bool have_length = false;
  bool have_batch = false;
  for (absl::string_view item : absl::StrSplit(rest, ',')) {
    std::pair<absl::string_view, absl::string_view> key_value = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const absl::string_view key = absl::StripAsciiWhitespace(key_value.first);
    const absl::string_view value = absl::StripAsciiWhitespace(key_value.second);
    int64_t* target = nullptr;
    bool* seen = nullptr;
    if (key == "L") {
      target = &max_length;
      seen = &have_length;
    } else if (key == "b") {
      target = &batch_size;
      seen = &have_batch;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown key \"", absl::CHexEscape(key), "\" in \"",
                                                     absl::CHexEscape(spec), "\"; ", kUsage));
    }
    if (*seen) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", key, " given twice in \"", absl::CHexEscape(spec), "\""));
    }
    if (!absl::SimpleAtoi(value, target)) {
      return absl::InvalidArgumentError(
          absl::StrCat("value of ", key, " must be an integer, got \"", absl::CHexEscape(value), "\""));
    }
    *seen = true;
  }
  if (!have_length || !have_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing ", have_length ? "b" : "L", " in \"", absl::CHexEscape(spec), "\"; ", kUsage));
  }
  BatchSpec batch = BatchSpec::Uniform(max_length, batch_size);
  if (absl::Status s = ValidateBatchSpec(batch); !s.ok()) return s;
  return batch;
}

}  // namespace slimfit::planner
