// The worker daemon's Prometheus metrics (docs/OPERATIONS.md lists them all): from each
// GradientSummary its ComputeGradient returns — engine seconds and tokens by kind (gradient or
// evaluation), parameter fetch and result streaming seconds, the shard's measured and predicted peak
// and their ratio — and, read at each scrape, its memory budget, the bytes of its parameter cache
// and who it is (id, device, version). RPC latencies and bytes come from rpc/rpc_metrics.h on the
// same registry; the summaries reach ObserveSummary through its ComputeGradient observer, so the
// service's code knows nothing of metrics.
//
// Thread safety: thread-safe. What CollectFrom reads must outlive every scrape.
#ifndef SLIMFIT_WORKER_WORKER_METRICS_H_
#define SLIMFIT_WORKER_WORKER_METRICS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "base/metrics.h"
#include "proto/slimfit.pb.h"

namespace slimfit::worker {

class WorkerMetrics {
 public:
  // What the worker is, read at each scrape.
  struct Identity {
    std::function<std::string()> worker_id;  // "" before the first registration
    std::string device;
    std::string version;
    int64_t memory_budget_bytes = 0;
    std::function<int64_t()> parameter_cache_bytes;
  };

  // Registers the families in `registry` (not owned; must outlive this).
  explicit WorkerMetrics(base::MetricRegistry* registry);
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // One finished shard: its summary (evaluate_only shards stream no gradient tensors).
  void ObserveSummary(const v1::GradientSummary& summary);

  // Adds the gauges read at each scrape. Call once.
  void CollectFrom(Identity identity);

 private:
  base::MetricRegistry* const registry_;
  base::HistogramFamily& engine_seconds_;
  base::CounterFamily& tokens_;
  base::CounterFamily& fetch_seconds_;
  base::CounterFamily& stream_seconds_;
  base::CounterFamily& result_bytes_;
  base::CounterFamily& local_steps_;
  base::GaugeFamily& last_peak_;
  base::GaugeFamily& last_predicted_peak_;
  base::GaugeFamily& max_peak_;
  base::HistogramFamily& peak_ratio_;
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_WORKER_METRICS_H_
