#include "worker/worker_metrics.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace slimfit::worker {
namespace {

using base::MetricFamily;
using base::MetricType;

const char* Kind(const v1::GradientSummary& summary) {
  if (summary.local_steps() > 0) return "pseudo_gradient";
  return summary.gradient_tensors() > 0 ? "gradient" : "evaluation";
}

}  // namespace

WorkerMetrics::WorkerMetrics(base::MetricRegistry* registry)
    : registry_(registry),
      engine_seconds_(
          registry->AddHistogram("slimfit_engine_seconds",
                                 "Seconds the engine computed per shard (all its sequences), by kind "
                                 "(gradient, pseudo_gradient: a local-steps shard, evaluation).",
                                 {"kind"}, base::ExponentialBuckets(0.01, 2, 15))),
      tokens_(registry->AddCounter("slimfit_engine_tokens_total",
                                   "Predicted tokens of the shards computed, by kind.", {"kind"})),
      fetch_seconds_(registry->AddCounter("slimfit_shard_fetch_seconds_total",
                                          "Seconds shards waited for their parameters to be fetched.", {})),
      stream_seconds_(registry->AddCounter("slimfit_shard_stream_seconds_total",
                                           "Seconds spent streaming gradients back to the coordinator.", {})),
      result_bytes_(registry->AddCounter("slimfit_result_bytes_total",
                                         "Tensor data bytes streamed back to the coordinator, by kind.",
                                         {"kind"})),
      local_steps_(registry->AddCounter("slimfit_local_steps_total",
                                        "Inner optimizer steps taken for local-steps jobs.", {})),
      last_peak_(registry->AddGauge("slimfit_shard_peak_bytes",
                                    "Measured peak tensor bytes of the last shard.", {})),
      last_predicted_peak_(registry->AddGauge("slimfit_shard_predicted_peak_bytes",
                                              "The plan's predicted peak bytes for the last shard.", {})),
      max_peak_(registry->AddGauge("slimfit_peak_bytes_max",
                                   "Highest measured peak tensor bytes of any shard.", {})),
      peak_ratio_(
          registry->AddHistogram("slimfit_shard_peak_ratio",
                                 "Measured over predicted peak bytes per shard (the cost model's accuracy).",
                                 {}, {0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0})) {}

void WorkerMetrics::ObserveSummary(const v1::GradientSummary& summary) {
  const char* kind = Kind(summary);
  engine_seconds_.WithLabels({kind}).Observe(summary.compute_seconds());
  tokens_.WithLabels({kind}).Increment(static_cast<double>(summary.token_count()));
  fetch_seconds_.Get().Increment(summary.fetch_seconds());
  stream_seconds_.Get().Increment(summary.stream_seconds());
  if (summary.gradient_bytes() > 0) {
    result_bytes_.WithLabels({kind}).Increment(static_cast<double>(summary.gradient_bytes()));
  }
  local_steps_.Get().Increment(summary.local_steps());
  const double measured = static_cast<double>(summary.measured_peak_bytes());
  const double predicted = static_cast<double>(summary.predicted_peak_bytes());
  last_peak_.Get().Set(measured);
  last_predicted_peak_.Get().Set(predicted);
  base::Gauge& most = max_peak_.Get();
  if (measured > most.value()) most.Set(measured);  // one shard at a time: no lost update
  if (predicted > 0 && measured > 0) peak_ratio_.Get().Observe(measured / predicted);
}

void WorkerMetrics::CollectFrom(Identity identity) {
  std::vector<MetricFamily> families = {
      {"slimfit_worker_info",
       "The worker: its id (empty before it registered), device and version.",
       MetricType::kGauge,
       {"worker_id", "device", "version"},
       {}},
      {"slimfit_memory_budget_bytes",
       "The worker's memory budget (--memory_budget).",
       MetricType::kGauge,
       {},
       {}},
      {"slimfit_parameter_cache_bytes",
       "Tensor bytes of the parameters the worker keeps cached.",
       MetricType::kGauge,
       {},
       {}},
  };
  registry_->AddCollector(
      std::move(families), [identity = std::move(identity)](std::vector<MetricFamily>* out) {
        (*out)[0].samples.push_back({{identity.worker_id(), identity.device, identity.version}, 1, {}});
        (*out)[1].samples.push_back({{}, static_cast<double>(identity.memory_budget_bytes), {}});
        (*out)[2].samples.push_back({{}, static_cast<double>(identity.parameter_cache_bytes()), {}});
      });
}

}  // namespace slimfit::worker
