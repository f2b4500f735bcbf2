#include "base/metrics.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace slimfit::base {
namespace {

template <typename Metric>
std::unique_ptr<Metric> MakeMetric(const std::vector<double>& bounds);

template <>
std::unique_ptr<Counter> MakeMetric<Counter>(const std::vector<double>&) {
  return std::make_unique<Counter>();
}

template <>
std::unique_ptr<Gauge> MakeMetric<Gauge>(const std::vector<double>&) {
  return std::make_unique<Gauge>();
}

template <>
std::unique_ptr<Histogram> MakeMetric<Histogram>(const std::vector<double>& bounds) {
  return std::make_unique<Histogram>(bounds);
}

void FillSample(const Counter& counter, MetricSample* sample) { sample->value = counter.value(); }
void FillSample(const Gauge& gauge, MetricSample* sample) { sample->value = gauge.value(); }
void FillSample(const Histogram& histogram, MetricSample* sample) {
  sample->histogram = histogram.Snapshot();
}

void AtomicAdd(std::atomic<double>& value, double amount) {
  double current = value.load(std::memory_order_relaxed);
  while (!value.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Counter::Increment(double amount) {
  if (!(amount >= 0) || std::isinf(amount)) return;
  AtomicAdd(value_, amount);
}

void Gauge::Add(double amount) { AtomicAdd(value_, amount); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // The first bucket whose upper bound is ≥ value (buckets are (previous, bound]).
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  absl::MutexLock lock(&mutex_);
  ++counts_[bucket];
  sum_ += value;
}

HistogramData Histogram::Snapshot() const {
  HistogramData data;
  data.bounds = bounds_;
  absl::MutexLock lock(&mutex_);
  data.counts = counts_;
  data.sum = sum_;
  return data;
}

std::vector<double> LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double bound = start;
  for (int i = 0; i < count; ++i) {
    bounds.push_back(bound);
    bound *= factor;
  }
  return bounds;
}

template <typename Metric>
Metric& MetricChildren<Metric>::WithLabels(std::vector<std::string> label_values) {
  label_values.resize(descriptor_.label_names.size());
  absl::MutexLock lock(&mutex_);
  std::unique_ptr<Metric>& child = children_[label_values];
  if (child == nullptr) child = MakeMetric<Metric>(bounds_);
  return *child;
}

template <typename Metric>
MetricFamily MetricChildren<Metric>::Snapshot() const {
  MetricFamily family = descriptor_;
  absl::MutexLock lock(&mutex_);
  family.samples.reserve(children_.size());
  for (const auto& [labels, child] : children_) {
    MetricSample sample;
    sample.label_values = labels;
    FillSample(*child, &sample);
    family.samples.push_back(std::move(sample));
  }
  return family;
}

template class MetricChildren<Counter>;
template class MetricChildren<Gauge>;
template class MetricChildren<Histogram>;

bool MetricRegistry::Register(const MetricFamily& descriptor, const std::vector<double>& bounds) {
  MetricFamily check = descriptor;
  check.samples.clear();
  if (descriptor.type == MetricType::kHistogram) {
    // One empty sample, so ValidateFamily looks at the bounds.
    MetricSample sample;
    sample.label_values.resize(descriptor.label_names.size());
    sample.histogram.bounds = bounds;
    sample.histogram.counts.assign(bounds.size() + 1, 0);
    check.samples.push_back(std::move(sample));
  }
  absl::Status status = ValidateFamily(check);
  if (status.ok() && std::find(names_.begin(), names_.end(), descriptor.name) != names_.end()) {
    status = absl::InvalidArgumentError(absl::StrCat("metric ", descriptor.name, " is registered twice"));
  }
  if (!status.ok()) {
    if (registration_status_.ok()) registration_status_ = status;
    return false;
  }
  names_.push_back(descriptor.name);
  return true;
}

template <typename Metric>
MetricChildren<Metric>& MetricRegistry::AddFamily(
    MetricFamily descriptor, std::vector<double> bounds,
    std::vector<std::unique_ptr<MetricChildren<Metric>>>* owned) {
  const bool exported = Register(descriptor, bounds);
  if (!exported) bounds.clear();  // a detached family still works
  owned->push_back(std::unique_ptr<MetricChildren<Metric>>(
      new MetricChildren<Metric>(std::move(descriptor), std::move(bounds))));
  MetricChildren<Metric>* family = owned->back().get();
  if (family->descriptor_.label_names.empty()) family->Get();  // exported as 0 from the start
  if (exported) {
    order_.push_back(static_cast<int>(snapshots_.size()));
    snapshots_.push_back([family] { return family->Snapshot(); });
  }
  return *family;
}

CounterFamily& MetricRegistry::AddCounter(const std::string& name, const std::string& help,
                                          std::vector<std::string> labels) {
  absl::MutexLock lock(&mutex_);
  return AddFamily<Counter>({name, help, MetricType::kCounter, std::move(labels), {}}, {}, &counters_);
}

GaugeFamily& MetricRegistry::AddGauge(const std::string& name, const std::string& help,
                                      std::vector<std::string> labels) {
  absl::MutexLock lock(&mutex_);
  return AddFamily<Gauge>({name, help, MetricType::kGauge, std::move(labels), {}}, {}, &gauges_);
}

HistogramFamily& MetricRegistry::AddHistogram(const std::string& name, const std::string& help,
                                              std::vector<std::string> labels, std::vector<double> bounds) {
  absl::MutexLock lock(&mutex_);
  return AddFamily<Histogram>({name, help, MetricType::kHistogram, std::move(labels), {}}, std::move(bounds),
                              &histograms_);
}

void MetricRegistry::AddCollector(std::vector<MetricFamily> families, Collect collect) {
  absl::MutexLock lock(&mutex_);
  bool exported = true;
  for (MetricFamily& family : families) {
    family.samples.clear();
    if (!Register(family, {})) exported = false;
  }
  if (!exported) return;
  order_.push_back(-1 - static_cast<int>(collectors_.size()));
  collectors_.push_back({std::move(families), std::move(collect)});
}

absl::Status MetricRegistry::registration_status() const {
  absl::MutexLock lock(&mutex_);
  return registration_status_;
}

std::string MetricRegistry::Exposition() const {
  absl::MutexLock scrape(&scrape_mutex_);
  std::vector<int> order;
  std::vector<std::function<MetricFamily()>> snapshots;
  std::vector<CollectorEntry> collectors;
  {
    absl::MutexLock lock(&mutex_);
    order = order_;
    snapshots = snapshots_;
    collectors = collectors_;
  }
  std::string text;
  for (int entry : order) {
    if (entry >= 0) {
      AppendExposition(snapshots[static_cast<size_t>(entry)](), &text);
      continue;
    }
    const CollectorEntry& collector = collectors[static_cast<size_t>(-1 - entry)];
    std::vector<MetricFamily> families = collector.families;
    collector.collect(&families);
    for (size_t i = 0; i < families.size() && i < collector.families.size(); ++i) {
      MetricFamily& family = families[i];
      // The collector fills samples only: the descriptor is what was registered.
      family.name = collector.families[i].name;
      family.help = collector.families[i].help;
      family.type = collector.families[i].type;
      family.label_names = collector.families[i].label_names;
      if (absl::Status valid = ValidateFamily(family); !valid.ok()) {
        LogWarning("metrics: dropping ", family.name, " from this scrape: ", valid.message());
        family.samples.clear();
      }
      AppendExposition(family, &text);
    }
  }
  return text;
}

}  // namespace slimfit::base
