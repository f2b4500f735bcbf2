#include "base/metrics.h"

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

TEST(Counter, OnlyGoesUp) {
  Counter counter;
  counter.Increment();
  counter.Increment(2.5);
  counter.Increment(-1);
  counter.Increment(std::nan(""));
  counter.Increment(INFINITY);
  EXPECT_EQ(counter.value(), 3.5);
}

TEST(Gauge, SetAndAdd) {
  Gauge gauge;
  gauge.Set(10);
  gauge.Add(-4);
  EXPECT_EQ(gauge.value(), 6);
}

TEST(Histogram, BucketsAreUpperInclusive) {
  Histogram histogram({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 5.0, 7.0, std::nan("")}) histogram.Observe(v);
  const HistogramData data = histogram.Snapshot();
  EXPECT_EQ(data.counts, (std::vector<uint64_t>{2, 2, 2, 1}));
  EXPECT_DOUBLE_EQ(data.sum, 21.0);
}

TEST(Buckets, ExponentialAndLatency) {
  EXPECT_EQ(ExponentialBuckets(1, 4, 4), (std::vector<double>{1, 4, 16, 64}));
  const std::vector<double> latency = LatencyBuckets();
  ASSERT_FALSE(latency.empty());
  for (size_t i = 1; i < latency.size(); ++i) EXPECT_LT(latency[i - 1], latency[i]);
}

TEST(MetricRegistry, ExposesFamiliesInRegistrationOrderWithChildrenByLabel) {
  MetricRegistry registry;
  CounterFamily& rounds = registry.AddCounter("rounds_total", "Rounds.", {});
  GaugeFamily& workers = registry.AddGauge("workers", "Workers by state.", {"state"});
  HistogramFamily& latency = registry.AddHistogram("latency_seconds", "Latency.", {"method"}, {0.1, 1});
  ASSERT_TRUE(registry.registration_status().ok()) << registry.registration_status();
  rounds.Get().Increment(2);
  workers.WithLabels({"IDLE"}).Set(3);
  workers.WithLabels({"BUSY"}).Set(1);
  latency.WithLabels({"Get"}).Observe(0.05);
  latency.WithLabels({"Get"}).Observe(3);
  EXPECT_EQ(registry.Exposition(),
            "# HELP rounds_total Rounds.\n"
            "# TYPE rounds_total counter\n"
            "rounds_total 2\n"
            "# HELP workers Workers by state.\n"
            "# TYPE workers gauge\n"
            "workers{state=\"BUSY\"} 1\n"
            "workers{state=\"IDLE\"} 3\n"
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{method=\"Get\",le=\"0.1\"} 1\n"
            "latency_seconds_bucket{method=\"Get\",le=\"1\"} 1\n"
            "latency_seconds_bucket{method=\"Get\",le=\"+Inf\"} 2\n"
            "latency_seconds_sum{method=\"Get\"} 3.05\n"
            "latency_seconds_count{method=\"Get\"} 2\n");
}

TEST(MetricRegistry, FamiliesWithoutLabelsStartAtZero) {
  MetricRegistry registry;
  registry.AddCounter("never_total", "Never happened.", {});
  registry.AddCounter("labelled_total", "Not yet.", {"kind"});
  EXPECT_EQ(registry.Exposition(),
            "# HELP never_total Never happened.\n# TYPE never_total counter\nnever_total 0\n"
            "# HELP labelled_total Not yet.\n# TYPE labelled_total counter\n");
}

TEST(MetricRegistry, WithLabelsReturnsTheSameChild) {
  MetricRegistry registry;
  CounterFamily& family = registry.AddCounter("c_total", "C.", {"a"});
  Counter& first = family.WithLabels({"x"});
  first.Increment();
  EXPECT_EQ(&family.WithLabels({"x"}), &first);
  EXPECT_EQ(family.WithLabels({"x"}).value(), 1);
}

TEST(MetricRegistry, BadRegistrationsAreDetachedAndReported) {
  MetricRegistry registry;
  registry.AddGauge("good", "Good.", {}).Get().Set(1);
  CounterFamily& twice = registry.AddCounter("good", "Again.", {});
  twice.Get().Increment();  // usable, not exported
  registry.AddGauge("bad-name", "Bad.", {}).Get().Set(2);
  registry.AddHistogram("h", "Bad bounds.", {}, {2, 1}).Get().Observe(1);
  const absl::Status status = registry.registration_status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("good is registered twice"), std::string::npos) << status;
  EXPECT_EQ(registry.Exposition(), "# HELP good Good.\n# TYPE good gauge\ngood 1\n");
}

TEST(MetricRegistry, CollectorsFillTheirFamiliesAtEachScrape) {
  MetricRegistry registry;
  int scrapes = 0;
  registry.AddCollector({{"busy_workers", "Busy.", MetricType::kGauge, {}, {}},
                         {"shards_total", "Shards by worker.", MetricType::kCounter, {"worker_id"}, {}}},
                        [&](std::vector<MetricFamily>* families) {
                          ++scrapes;
                          (*families)[0].samples.push_back({{}, static_cast<double>(scrapes), {}});
                          (*families)[1].samples.push_back({{"w-1"}, 7, {}});
                        });
  ASSERT_TRUE(registry.registration_status().ok());
  const std::string first = registry.Exposition();
  EXPECT_NE(first.find("busy_workers 1\n"), std::string::npos) << first;
  EXPECT_NE(first.find("# TYPE shards_total counter\nshards_total{worker_id=\"w-1\"} 7\n"), std::string::npos)
      << first;
  EXPECT_NE(registry.Exposition().find("busy_workers 2\n"), std::string::npos);
}

TEST(MetricRegistry, ACollectorsInvalidSamplesDropOnlyThatFamily) {
  MetricRegistry registry;
  registry.AddCollector(
      {{"bad", "Bad.", MetricType::kGauge, {"a"}, {}}, {"fine", "Fine.", MetricType::kGauge, {}, {}}},
      [](std::vector<MetricFamily>* families) {
        (*families)[0].samples.push_back({{}, 1, {}});  // missing its label
        (*families)[1].samples.push_back({{}, 5, {}});
      });
  EXPECT_EQ(registry.Exposition(),
            "# HELP bad Bad.\n# TYPE bad gauge\n"
            "# HELP fine Fine.\n# TYPE fine gauge\nfine 5\n");
}

TEST(MetricRegistry, ConcurrentUpdatesAreAllCounted) {
  MetricRegistry registry;
  CounterFamily& counter = registry.AddCounter("n_total", "N.", {"thread"});
  HistogramFamily& histogram = registry.AddHistogram("h", "H.", {}, {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        counter.WithLabels({"shared"}).Increment();
        counter.WithLabels({std::to_string(t)}).Increment();
        histogram.Get().Observe(1);
        if (i % 1000 == 0) (void)registry.Exposition();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counter.WithLabels({"shared"}).value(), 40000);
  EXPECT_EQ(histogram.Get().Snapshot().counts.back(), 40000u);
}

}  // namespace
}  // namespace slimfit::base
