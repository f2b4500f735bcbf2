#include "base/metrics_exposition.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

TEST(MetricNames, AcceptsPrometheusNamesAndRefusesOthers) {
  EXPECT_TRUE(ValidateMetricName("slimfit_rounds_total").ok());
  EXPECT_TRUE(ValidateMetricName("job:rounds:rate5m").ok());
  EXPECT_TRUE(ValidateMetricName("_x").ok());
  for (const char* bad : {"", "1abc", "has-dash", "has space", "é"}) {
    const absl::Status status = ValidateMetricName(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(ValidateLabelName("worker_id").ok());
  EXPECT_EQ(ValidateLabelName("__name__").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLabelName("a:b").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLabelName("").code(), absl::StatusCode::kInvalidArgument);
}

TEST(Escaping, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\\b"), "a\\\\b");
  EXPECT_EQ(EscapeLabelValue("say \"hi\""), "say \\\"hi\\\"");
  EXPECT_EQ(EscapeLabelValue("two\nlines"), "two\\nlines");
  EXPECT_EQ(EscapeLabelValue("tab\tstays"), "tab\tstays");
}

TEST(Escaping, HelpEscapesBackslashAndNewlineButNotQuotes) {
  EXPECT_EQ(EscapeHelp("a \"quoted\" c:\\path\nnext"), "a \"quoted\" c:\\\\path\\nnext");
}

TEST(Values, IntegersExactlyAndFractionsRoundTrip) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(42), "42");
  EXPECT_EQ(FormatMetricValue(-3), "-3");
  EXPECT_EQ(FormatMetricValue(123456789012.0), "123456789012");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(2.5), "2.5");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  for (double value : {1.0 / 3.0, 2.0 / 3.0 * 1e-9, 6.02214076e23, 1e300, -0.000123456789}) {
    const std::string text = FormatMetricValue(value);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), value) << text;
  }
}

TEST(Exposition, CounterWithLabelsAndEscapedValues) {
  MetricFamily family;
  family.name = "slimfit_shard_reassignments_total";
  family.help = "Shards sent again.\nSecond line with a \\.";
  family.type = MetricType::kCounter;
  family.label_names = {"job_id", "reason"};
  family.samples.push_back({{"job-000001", "worker \"w-1\" lost\nat once"}, 3, {}});
  family.samples.push_back({{"job-000002", "c:\\x"}, 0.5, {}});
  ASSERT_TRUE(ValidateFamily(family).ok());
  std::string text;
  AppendExposition(family, &text);
  EXPECT_EQ(text,
            "# HELP slimfit_shard_reassignments_total Shards sent again.\\nSecond line with a \\\\.\n"
            "# TYPE slimfit_shard_reassignments_total counter\n"
            "slimfit_shard_reassignments_total{job_id=\"job-000001\",reason=\"worker \\\"w-1\\\" lost\\nat "
            "once\"} 3\n"
            "slimfit_shard_reassignments_total{job_id=\"job-000002\",reason=\"c:\\\\x\"} 0.5\n");
}

TEST(Exposition, GaugeWithoutLabelsAndEmptyFamilies) {
  MetricFamily gauge{"slimfit_worker_memory_budget_bytes", "Budget.", MetricType::kGauge, {}, {}};
  gauge.samples.push_back({{}, 536870912, {}});
  MetricFamily empty{"slimfit_workers", "Workers by state.", MetricType::kGauge, {"state"}, {}};
  std::string text;
  AppendExposition(gauge, &text);
  AppendExposition(empty, &text);
  EXPECT_EQ(text,
            "# HELP slimfit_worker_memory_budget_bytes Budget.\n"
            "# TYPE slimfit_worker_memory_budget_bytes gauge\n"
            "slimfit_worker_memory_budget_bytes 536870912\n"
            "# HELP slimfit_workers Workers by state.\n"
            "# TYPE slimfit_workers gauge\n");
}

TEST(Exposition, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  MetricFamily family{"slimfit_rpc_server_seconds", "Latency.", MetricType::kHistogram, {"method"}, {}};
  MetricSample sample;
  sample.label_values = {"/a/B"};
  sample.histogram.bounds = {0.01, 0.1, 1};
  sample.histogram.counts = {2, 0, 3, 1};  // ≤ 0.01: 2, (0.1, 1]: 3, > 1: 1
  sample.histogram.sum = 4.25;
  family.samples.push_back(sample);
  ASSERT_TRUE(ValidateFamily(family).ok());
  std::string text;
  AppendExposition(family, &text);
  EXPECT_EQ(text,
            "# HELP slimfit_rpc_server_seconds Latency.\n"
            "# TYPE slimfit_rpc_server_seconds histogram\n"
            "slimfit_rpc_server_seconds_bucket{method=\"/a/B\",le=\"0.01\"} 2\n"
            "slimfit_rpc_server_seconds_bucket{method=\"/a/B\",le=\"0.1\"} 2\n"
            "slimfit_rpc_server_seconds_bucket{method=\"/a/B\",le=\"1\"} 5\n"
            "slimfit_rpc_server_seconds_bucket{method=\"/a/B\",le=\"+Inf\"} 6\n"
            "slimfit_rpc_server_seconds_sum{method=\"/a/B\"} 4.25\n"
            "slimfit_rpc_server_seconds_count{method=\"/a/B\"} 6\n");
}

TEST(Exposition, HistogramWithoutLabelsHasOnlyLe) {
  MetricFamily family{"engine_seconds", "Engine.", MetricType::kHistogram, {}, {}};
  MetricSample sample;
  sample.histogram.bounds = {1};
  sample.histogram.counts = {0, 0};
  family.samples.push_back(sample);
  std::string text;
  AppendExposition(family, &text);
  EXPECT_NE(text.find("engine_seconds_bucket{le=\"1\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("engine_seconds_bucket{le=\"+Inf\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("engine_seconds_sum 0\nengine_seconds_count 0\n"), std::string::npos) << text;
}

TEST(ValidateFamily, RefusesWhatWouldNotParse) {
  MetricFamily base{"m", "help", MetricType::kGauge, {"a"}, {}};

  MetricFamily wrong_count = base;
  wrong_count.samples.push_back({{"x", "y"}, 1, {}});
  EXPECT_EQ(ValidateFamily(wrong_count).code(), absl::StatusCode::kInvalidArgument);

  MetricFamily twice = base;
  twice.samples.push_back({{"x"}, 1, {}});
  twice.samples.push_back({{"x"}, 2, {}});
  EXPECT_EQ(ValidateFamily(twice).code(), absl::StatusCode::kInvalidArgument);

  MetricFamily repeated_label = base;
  repeated_label.label_names = {"a", "a"};
  EXPECT_EQ(ValidateFamily(repeated_label).code(), absl::StatusCode::kInvalidArgument);

  MetricFamily negative_counter{"c_total", "help", MetricType::kCounter, {}, {{{}, -1, {}}}};
  EXPECT_EQ(ValidateFamily(negative_counter).code(), absl::StatusCode::kInvalidArgument);

  MetricFamily le_label{"h", "help", MetricType::kHistogram, {"le"}, {}};
  EXPECT_EQ(ValidateFamily(le_label).code(), absl::StatusCode::kInvalidArgument);

  MetricFamily bad_bounds{"h", "help", MetricType::kHistogram, {}, {}};
  MetricSample sample;
  sample.histogram.bounds = {1, 1};
  sample.histogram.counts = {0, 0, 0};
  bad_bounds.samples.push_back(sample);
  EXPECT_EQ(ValidateFamily(bad_bounds).code(), absl::StatusCode::kInvalidArgument);

  MetricFamily bad_counts = bad_bounds;
  bad_counts.samples[0].histogram.bounds = {1, 2};
  bad_counts.samples[0].histogram.counts = {0, 0};
  EXPECT_EQ(ValidateFamily(bad_counts).code(), absl::StatusCode::kInvalidArgument);

  MetricFamily bad_name = base;
  bad_name.name = "9lives";
  EXPECT_EQ(ValidateFamily(bad_name).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::base
