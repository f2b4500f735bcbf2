// The Prometheus text exposition format, version 0.0.4 — what `GET /metrics` answers and what
// Prometheus, its Python client and most collectors parse:
//
//   # HELP slimfit_rpc_server_seconds Server-side latency of RPCs by method and status code.
//   # TYPE slimfit_rpc_server_seconds histogram
//   slimfit_rpc_server_seconds_bucket{method="/slimfit.v1.Coordinator/GetJob",code="OK",le="0.005"} 3
//   ...
//   slimfit_rpc_server_seconds_bucket{method="/slimfit.v1.Coordinator/GetJob",code="OK",le="+Inf"} 4
//   slimfit_rpc_server_seconds_sum{method="/slimfit.v1.Coordinator/GetJob",code="OK"} 0.0132
//   slimfit_rpc_server_seconds_count{method="/slimfit.v1.Coordinator/GetJob",code="OK"} 4
//
// A family is written as its HELP line (backslash and newline escaped), its TYPE line and one line
// per sample; label values have backslash, double quote and newline escaped; values are written
// exactly (integers as integers, other numbers with enough digits to read back the same double,
// +Inf, -Inf, NaN). Histogram buckets are cumulative with an `le` label, end with le="+Inf" equal
// to _count, and are followed by _sum and _count.
//
// These are pure functions over plain values; base/metrics.h keeps live metrics and produces them.
// Thread safety: pure functions.
#ifndef SLIMFIT_BASE_METRICS_EXPOSITION_H_
#define SLIMFIT_BASE_METRICS_EXPOSITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace slimfit::base {

// The Content-Type of a text exposition.
inline constexpr char kExpositionContentType[] = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge, kHistogram };

// "counter", "gauge", "histogram".
const char* MetricTypeName(MetricType type);

// One histogram's observations: per bucket (not cumulative) counts; bucket i holds values in
// (bounds[i-1], bounds[i]] and the last one, counts[bounds.size()], those above bounds.back().
struct HistogramData {
  std::vector<double> bounds;    // finite, strictly increasing upper bounds
  std::vector<uint64_t> counts;  // bounds.size() + 1 entries
  double sum = 0;                // of every observation
};

struct MetricSample {
  std::vector<std::string> label_values;  // one per MetricFamily::label_names, in that order
  double value = 0;                       // counters (≥ 0) and gauges
  HistogramData histogram;                // histograms
};

struct MetricFamily {
  std::string name;  // [a-zA-Z_:][a-zA-Z0-9_:]*; a counter's conventionally ends in "_total"
  std::string help;  // one line of text; any bytes (escaped when written)
  MetricType type = MetricType::kGauge;
  // [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__", distinct; "le" is reserved for histograms.
  std::vector<std::string> label_names;
  std::vector<MetricSample> samples;  // each label set at most once
};

// INVALID_ARGUMENT naming the offending name.
absl::Status ValidateMetricName(absl::string_view name);
absl::Status ValidateLabelName(absl::string_view name);
// The names, the label names; every sample: its label count, a counter's value finite and ≥ 0, a
// histogram's bounds (finite, strictly increasing) and counts (one more than the bounds), no label
// set twice. INVALID_ARGUMENT naming the family and what is wrong.
absl::Status ValidateFamily(const MetricFamily& family);

// `\` → `\\`, `"` → `\"`, newline → `\n`.
std::string EscapeLabelValue(absl::string_view value);
// `\` → `\\`, newline → `\n`.
std::string EscapeHelp(absl::string_view help);
// "42", "-3", "0.1", "1.5e+20", "+Inf", "-Inf", "NaN": integers exactly when they are whole and
// below 2^53 in magnitude, other values with the fewest digits (≤ 17) that read back the same double.
std::string FormatMetricValue(double value);

// Appends `family` in the text format. REQUIRES: ValidateFamily(family) is OK.
void AppendExposition(const MetricFamily& family, std::string* out);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_METRICS_EXPOSITION_H_
