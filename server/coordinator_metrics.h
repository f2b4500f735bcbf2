// The coordinator's Prometheus metrics (docs/OPERATIONS.md lists them all): counters fed by the
// events jobs publish (rounds, where their time and bytes went, shards, reassignments, spot checks,
// quarantines, evaluations, checkpoints, finished jobs), and gauges read from the coordinator at
// each scrape (workers by state; per worker its budget, measured peak, shards and, per job, its
// plan's predicted and measured peak bytes and tokens per second; per active job its progress,
// loss, held-out loss, tokens per second and ETA). RPC latencies and bytes come from
// rpc/rpc_metrics.h, on the same registry.
//
// Counters span all jobs (no job label), so their label sets stay bounded however many jobs run;
// per-job values are gauges of the jobs running now.
//
// Example (the daemon):
//   base::MetricRegistry registry;
//   CoordinatorMetrics metrics(&registry);
//   options.event_observer = [&metrics](const v1::JobEvent& e) { metrics.ObserveEvent(e); };
//   ... Coordinator::Create(options) ...
//   metrics.CollectFrom(coordinator.get());
//
// Thread safety: thread-safe. The coordinator given to CollectFrom must outlive every scrape.
#ifndef SLIMFIT_SERVER_COORDINATOR_METRICS_H_
#define SLIMFIT_SERVER_COORDINATOR_METRICS_H_

#include <vector>

#include "base/metrics.h"
#include "proto/slimfit.pb.h"
#include "server/coordinator.h"

namespace slimfit::server {

class CoordinatorMetrics {
 public:
  // Registers the families in `registry` (not owned; must outlive this).
  explicit CoordinatorMetrics(base::MetricRegistry* registry);
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  // Counts one published job event.
  void ObserveEvent(const v1::JobEvent& event);

  // Adds the gauges read from `coordinator` at each scrape. Call once.
  void CollectFrom(Coordinator* coordinator);

  // The samples of the scrape-time families (in the order CollectFrom registers them), for a
  // snapshot of the workers and active jobs. Exposed for tests.
  static void FillWorkerAndJobFamilies(const std::vector<v1::WorkerInfo>& workers,
                                       const std::vector<v1::Job>& jobs,
                                       std::vector<base::MetricFamily>* families);
  static std::vector<base::MetricFamily> WorkerAndJobFamilies();

 private:
  base::MetricRegistry* const registry_;
  base::CounterFamily& rounds_;
  base::HistogramFamily& round_seconds_;
  base::CounterFamily& round_phase_seconds_;
  base::CounterFamily& round_worker_seconds_;
  base::CounterFamily& round_bytes_;
  base::CounterFamily& tokens_;
  base::CounterFamily& shards_;
  base::CounterFamily& reassignments_;
  base::CounterFamily& recomputations_;
  base::CounterFamily& verifications_;
  base::CounterFamily& quarantines_;
  base::CounterFamily& evaluations_;
  base::CounterFamily& checkpoints_;
  base::CounterFamily& checkpoint_bytes_;
  base::CounterFamily& jobs_finished_;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_COORDINATOR_METRICS_H_
