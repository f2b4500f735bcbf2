#include "base/metrics_exposition.h"

#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace slimfit::base {
namespace {

bool IsNameStart(char c, bool colon_allowed) {
  return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' || (colon_allowed && c == ':');
}

bool IsNameChar(char c, bool colon_allowed) {
  return IsNameStart(c, colon_allowed) || absl::ascii_isdigit(static_cast<unsigned char>(c));
}

bool IsValidName(absl::string_view name, bool colon_allowed) {
  if (name.empty() || !IsNameStart(name[0], colon_allowed)) return false;
  for (char c : name) {
    if (!IsNameChar(c, colon_allowed)) return false;
  }
  return true;
}

// Backslash and newline escaped, and double quotes when `quotes`.
std::string Escape(absl::string_view text, bool quotes) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '\n') {
      escaped += "\\n";
    } else if (c == '"' && quotes) {
      escaped += "\\\"";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

// `{a="x",b="y"}` (with `extra` as the last label when given), or "" without labels.
std::string LabelText(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      absl::string_view extra_name = "", absl::string_view extra_value = "") {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&text, text.empty() ? "" : ",", names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&text, text.empty() ? "" : ",", extra_name, "=\"", EscapeLabelValue(extra_value), "\"");
  }
  return text.empty() ? text : absl::StrCat("{", text, "}");
}

void AppendLine(absl::string_view name, absl::string_view suffix, const std::string& labels, double value,
                std::string* out) {
  absl::StrAppend(out, name, suffix, labels, " ", FormatMetricValue(value), "\n");
}

}  // namespace

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

absl::Status ValidateMetricName(absl::string_view name) {
  if (IsValidName(name, true)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("metric name \"", absl::CHexEscape(name), "\": expected [a-zA-Z_:][a-zA-Z0-9_:]*"));
}

absl::Status ValidateLabelName(absl::string_view name) {
  if (IsValidName(name, false) && !absl::StartsWith(name, "__")) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("label name \"", absl::CHexEscape(name),
                                                 "\": expected [a-zA-Z_][a-zA-Z0-9_]* not starting with __"));
}

absl::Status ValidateFamily(const MetricFamily& family) {
  if (absl::Status s = ValidateMetricName(family.name); !s.ok()) return s;
  auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("metric ", family.name, ": ", what));
  };
  std::set<std::string> names;
  for (const std::string& label : family.label_names) {
    if (absl::Status s = ValidateLabelName(label); !s.ok()) return fail(s.message());
    if (label == "le" && family.type == MetricType::kHistogram) {
      return fail("label \"le\" is reserved for a histogram's buckets");
    }
    if (!names.insert(label).second) return fail(absl::StrCat("label \"", label, "\" appears twice"));
  }
  std::set<std::vector<std::string>> label_sets;
  for (const MetricSample& sample : family.samples) {
    if (sample.label_values.size() != family.label_names.size()) {
      return fail(absl::StrCat("a sample has ", sample.label_values.size(), " label values for ",
                               family.label_names.size(), " labels"));
    }
    if (!label_sets.insert(sample.label_values).second) {
      return fail(absl::StrCat("the labels {", absl::StrJoin(sample.label_values, ","), "} appear twice"));
    }
    if (family.type == MetricType::kCounter && !(std::isfinite(sample.value) && sample.value >= 0)) {
      return fail(
          absl::StrCat("a counter's value must be finite and ≥ 0, not ", FormatMetricValue(sample.value)));
    }
    if (family.type == MetricType::kHistogram) {
      const HistogramData& h = sample.histogram;
      if (h.counts.size() != h.bounds.size() + 1) {
        return fail(absl::StrCat("a histogram has ", h.counts.size(), " bucket counts for ", h.bounds.size(),
                                 " bounds (expected one more: the +Inf bucket)"));
      }
      for (size_t i = 0; i < h.bounds.size(); ++i) {
        if (!std::isfinite(h.bounds[i]) || (i > 0 && !(h.bounds[i] > h.bounds[i - 1]))) {
          return fail("histogram bounds must be finite and strictly increasing");
        }
      }
    }
  }
  return absl::OkStatus();
}

std::string EscapeLabelValue(absl::string_view value) { return Escape(value, /*quotes=*/true); }

std::string EscapeHelp(absl::string_view help) { return Escape(help, /*quotes=*/false); }

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  constexpr double kExactIntegers = 9007199254740992.0;  // 2^53
  if (value == std::floor(value) && std::fabs(value) < kExactIntegers) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  for (int digits = 15; digits <= 17; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

void AppendExposition(const MetricFamily& family, std::string* out) {
  absl::StrAppend(out, "# HELP ", family.name, " ", EscapeHelp(family.help), "\n");
  absl::StrAppend(out, "# TYPE ", family.name, " ", MetricTypeName(family.type), "\n");
  for (const MetricSample& sample : family.samples) {
    if (family.type != MetricType::kHistogram) {
      AppendLine(family.name, "", LabelText(family.label_names, sample.label_values), sample.value, out);
      continue;
    }
    const HistogramData& h = sample.histogram;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      AppendLine(family.name, "_bucket",
                 LabelText(family.label_names, sample.label_values, "le", FormatMetricValue(h.bounds[i])),
                 static_cast<double>(cumulative), out);
    }
    cumulative += h.counts.back();
    AppendLine(family.name, "_bucket", LabelText(family.label_names, sample.label_values, "le", "+Inf"),
               static_cast<double>(cumulative), out);
    const std::string labels = LabelText(family.label_names, sample.label_values);
    AppendLine(family.name, "_sum", labels, h.sum, out);
    AppendLine(family.name, "_count", labels, static_cast<double>(cumulative), out);
  }
}

}  // namespace slimfit::base
