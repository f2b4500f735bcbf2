#include "worker/worker_metrics.h"

#include <string>

#include "base/metrics.h"
#include "gtest/gtest.h"

namespace slimfit::worker {
namespace {

double Value(const std::string& text, const std::string& series) {
  const std::string prefix = "\n" + series + " ";
  const size_t at = ("\n" + text).find(prefix);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + prefix.size() - 1));
}

v1::GradientSummary Summary(double seconds, int64_t tokens, int64_t measured, int64_t predicted,
                            int tensors) {
  v1::GradientSummary summary;
  summary.set_compute_seconds(seconds);
  summary.set_token_count(tokens);
  summary.set_measured_peak_bytes(measured);
  summary.set_predicted_peak_bytes(predicted);
  summary.set_gradient_tensors(tensors);
  summary.set_fetch_seconds(0.25);
  summary.set_stream_seconds(0.5);
  return summary;
}

TEST(WorkerMetrics, CountsShardsFromTheirSummaries) {
  base::MetricRegistry registry;
  WorkerMetrics metrics(&registry);
  ASSERT_TRUE(registry.registration_status().ok()) << registry.registration_status();
  metrics.ObserveSummary(Summary(0.5, 1000, 900, 1000, 12));
  metrics.ObserveSummary(Summary(2.0, 3000, 1200, 1000, 12));
  metrics.ObserveSummary(Summary(0.1, 500, 800, 1000, 0));  // an evaluation
  const std::string text = registry.Exposition();
  EXPECT_EQ(Value(text, "slimfit_engine_seconds_count{kind=\"gradient\"}"), 2) << text;
  EXPECT_EQ(Value(text, "slimfit_engine_seconds_sum{kind=\"gradient\"}"), 2.5);
  EXPECT_EQ(Value(text, "slimfit_engine_seconds_count{kind=\"evaluation\"}"), 1);
  EXPECT_EQ(Value(text, "slimfit_engine_tokens_total{kind=\"gradient\"}"), 4000);
  EXPECT_EQ(Value(text, "slimfit_engine_tokens_total{kind=\"evaluation\"}"), 500);
  EXPECT_EQ(Value(text, "slimfit_shard_fetch_seconds_total"), 0.75);
  EXPECT_EQ(Value(text, "slimfit_shard_stream_seconds_total"), 1.5);
  EXPECT_EQ(Value(text, "slimfit_shard_peak_bytes"), 800);
  EXPECT_EQ(Value(text, "slimfit_shard_predicted_peak_bytes"), 1000);
  EXPECT_EQ(Value(text, "slimfit_peak_bytes_max"), 1200);
  EXPECT_EQ(Value(text, "slimfit_shard_peak_ratio_bucket{le=\"0.9\"}"), 2);  // 0.9 and 0.8
  EXPECT_EQ(Value(text, "slimfit_shard_peak_ratio_bucket{le=\"1.1\"}"), 2);
  EXPECT_EQ(Value(text, "slimfit_shard_peak_ratio_bucket{le=\"1.25\"}"), 3);  // 1.2
}

TEST(WorkerMetrics, CountsResultBytesByKindAndInnerSteps) {
  base::MetricRegistry registry;
  WorkerMetrics metrics(&registry);
  ASSERT_TRUE(registry.registration_status().ok()) << registry.registration_status();
  v1::GradientSummary gradient = Summary(0.5, 1000, 900, 1000, 12);
  gradient.set_gradient_bytes(4096);
  v1::GradientSummary local = Summary(1.5, 5000, 900, 1000, 12);
  local.set_gradient_bytes(4096);
  local.set_local_steps(10);
  metrics.ObserveSummary(gradient);
  metrics.ObserveSummary(local);
  metrics.ObserveSummary(local);
  const std::string text = registry.Exposition();
  EXPECT_EQ(Value(text, "slimfit_result_bytes_total{kind=\"gradient\"}"), 4096) << text;
  EXPECT_EQ(Value(text, "slimfit_result_bytes_total{kind=\"pseudo_gradient\"}"), 8192);
  EXPECT_EQ(Value(text, "slimfit_local_steps_total"), 20);
  EXPECT_EQ(Value(text, "slimfit_engine_tokens_total{kind=\"pseudo_gradient\"}"), 10000);
}

TEST(WorkerMetrics, IdentityBudgetAndCacheAreReadAtEachScrape) {
  base::MetricRegistry registry;
  WorkerMetrics metrics(&registry);
  std::string id;
  int64_t cache = 0;
  WorkerMetrics::Identity identity;
  identity.worker_id = [&] { return id; };
  identity.device = "cpu";
  identity.version = "0.4.0";
  identity.memory_budget_bytes = 512 << 20;
  identity.parameter_cache_bytes = [&] { return cache; };
  metrics.CollectFrom(identity);
  ASSERT_TRUE(registry.registration_status().ok()) << registry.registration_status();
  std::string text = registry.Exposition();
  EXPECT_EQ(Value(text, "slimfit_worker_info{worker_id=\"\",device=\"cpu\",version=\"0.4.0\"}"), 1) << text;
  EXPECT_EQ(Value(text, "slimfit_memory_budget_bytes"), 512 << 20);
  EXPECT_EQ(Value(text, "slimfit_parameter_cache_bytes"), 0);
  id = "w-1";
  cache = 4096;
  text = registry.Exposition();
  EXPECT_EQ(Value(text, "slimfit_worker_info{worker_id=\"w-1\",device=\"cpu\",version=\"0.4.0\"}"), 1)
      << text;
  EXPECT_EQ(Value(text, "slimfit_parameter_cache_bytes"), 4096);
}

}  // namespace
}  // namespace slimfit::worker
