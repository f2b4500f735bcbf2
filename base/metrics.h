// Live metrics of a process and their Prometheus exposition (base/metrics_exposition.h): counters,
// gauges and histograms in labelled families that code updates as things happen, and collectors
// that read values kept elsewhere (the workers by state) when a scrape asks.
//
// Example:
//   MetricRegistry registry;
//   CounterFamily& rounds = registry.AddCounter("slimfit_rounds_total", "Rounds completed.", {});
//   HistogramFamily& latency = registry.AddHistogram(
//       "slimfit_rpc_server_seconds", "RPC latency.", {"method", "code"}, LatencyBuckets());
//   rounds.Get().Increment();
//   latency.WithLabels({"/slimfit.v1.Coordinator/GetJob", "OK"}).Observe(0.003);
//   registry.AddCollector({{"slimfit_workers", "Workers by state.", MetricType::kGauge, {"state"}, {}}},
//                         [&](std::vector<MetricFamily>* families) { /* fill (*families)[0].samples */ });
//   if (absl::Status s = registry.registration_status(); !s.ok()) return s;  // a bad name
//   std::string text = registry.Exposition();
//
// Registration never fails at the call: a family with an invalid or repeated name, or invalid label
// names, is detached (usable, never exported) and registration_status() reports the first such
// error, so a daemon checks it once at start-up and its tests check it too. A family without labels
// is exported (at zero) from its registration; one with labels, from its first child. A child metric
// (WithLabels) lives as long as the registry; children are never removed, so keep label values to
// bounded sets (ids of workers and jobs, methods, codes), never request data.
//
// Thread safety: everything is thread-safe. Metric updates are lock-free (counters, gauges) or take
// the histogram's own mutex; WithLabels takes its family's mutex. Collectors run on the scraping
// thread, one scrape at a time.
#ifndef SLIMFIT_BASE_METRICS_H_
#define SLIMFIT_BASE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/metrics_exposition.h"

namespace slimfit::base {

// A value that only goes up (events, seconds spent, bytes moved).
class Counter {
 public:
  // Adds `amount`. REQUIRES: amount ≥ 0 and finite (anything else is ignored: a counter never
  // goes down).
  void Increment(double amount = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down (bytes held, workers busy).
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted in buckets (latencies, sizes), with their sum.
class Histogram {
 public:
  // REQUIRES: `bounds` finite and strictly increasing (the family checks it).
  explicit Histogram(std::vector<double> bounds);
  // NaN is ignored.
  void Observe(double value);
  HistogramData Snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mutex_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mutex_);
  double sum_ ABSL_GUARDED_BY(mutex_) = 0;
};

// Upper bounds for latencies in seconds: 0.5 ms to 2 minutes, about three per decade.
std::vector<double> LatencyBuckets();
// `count` bounds start, start·factor, start·factor², …  REQUIRES: start > 0, factor > 1, count ≥ 1.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// The metrics of one name: one child per set of label values.
template <typename Metric>
class MetricChildren {
 public:
  MetricChildren(const MetricChildren&) = delete;
  MetricChildren& operator=(const MetricChildren&) = delete;

  // The child for `label_values` (one per label name, in order), created at zero on first use. A
  // wrong number of values is a programming error: the values are padded with "" or cut.
  Metric& WithLabels(std::vector<std::string> label_values);
  // The child without labels. REQUIRES: the family has no labels.
  Metric& Get() { return WithLabels({}); }

 private:
  friend class MetricRegistry;
  MetricChildren(MetricFamily descriptor, std::vector<double> bounds)
      : descriptor_(std::move(descriptor)), bounds_(std::move(bounds)) {}
  // The family with a sample per child, in label order.
  MetricFamily Snapshot() const;

  const MetricFamily descriptor_;     // name, help, type, label names
  const std::vector<double> bounds_;  // histograms
  mutable absl::Mutex mutex_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_ ABSL_GUARDED_BY(mutex_);
};

using CounterFamily = MetricChildren<Counter>;
using GaugeFamily = MetricChildren<Gauge>;
using HistogramFamily = MetricChildren<Histogram>;

class MetricRegistry {
 public:
  // Fills the samples of the families it was registered with (given in the same order, with their
  // name, help, type and label names set and no samples). Runs at every scrape.
  using Collect = std::function<void(std::vector<MetricFamily>* families)>;

  MetricRegistry() = default;
  MetricRegistry(const MetricRegistry&) = delete;
  MetricRegistry& operator=(const MetricRegistry&) = delete;

  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> labels);
  GaugeFamily& AddGauge(const std::string& name, const std::string& help, std::vector<std::string> labels);
  // `bounds`: the buckets' finite, strictly increasing upper bounds (+Inf is added).
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                std::vector<std::string> labels, std::vector<double> bounds);
  // Families whose samples `collect` provides at each scrape. Samples that do not fit their family
  // (label count, a label set twice, a negative counter) drop that family from the scrape, with a
  // warning in the log.
  void AddCollector(std::vector<MetricFamily> families, Collect collect);

  // OK, or the first registration error (an invalid or repeated name, invalid label names or
  // histogram bounds): INVALID_ARGUMENT naming the metric.
  absl::Status registration_status() const;

  // Every exported family in registration order, as the text format.
  std::string Exposition() const;

 private:
  struct CollectorEntry {
    std::vector<MetricFamily> families;
    Collect collect;
  };
  // Checks `descriptor` and claims its name; false (and the first error kept) when it is invalid.
  bool Register(const MetricFamily& descriptor, const std::vector<double>& bounds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Registers, creates and (when valid) lists a family kept in `owned`.
  template <typename Metric>
  MetricChildren<Metric>& AddFamily(MetricFamily descriptor, std::vector<double> bounds,
                                    std::vector<std::unique_ptr<MetricChildren<Metric>>>* owned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex scrape_mutex_;  // one scrape at a time (collectors need not be reentrant)
  mutable absl::Mutex mutex_;
  absl::Status registration_status_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> names_ ABSL_GUARDED_BY(mutex_);
  // In registration order; detached families are kept alive but not listed here.
  std::vector<std::function<MetricFamily()>> snapshots_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::unique_ptr<CounterFamily>> counters_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::unique_ptr<GaugeFamily>> gauges_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::unique_ptr<HistogramFamily>> histograms_ ABSL_GUARDED_BY(mutex_);
  std::vector<CollectorEntry> collectors_ ABSL_GUARDED_BY(mutex_);
  // The order of owned families and collectors: index into snapshots_ (≥ 0) or -1 - collector index.
  std::vector<int> order_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_METRICS_H_
