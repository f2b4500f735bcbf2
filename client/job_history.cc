#include "client/job_history.h"

#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/svg_chart.h"

namespace slimfit::client {

absl::StatusOr<std::vector<v1::JobEvent>> ReadJobHistory(const CoordinatorClient& client,
                                                         const std::string& job_id) {
  std::unique_ptr<grpc::ClientContext> context = client.StreamContext();
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_from_start(true);
  std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
      client.stub().WatchJob(context.get(), request);
  std::vector<v1::JobEvent> history;
  int64_t last = -1;  // the snapshot's sequence, once seen
  v1::JobEvent event;
  bool complete = false;
  while (reader->Read(&event)) {
    if (history.empty()) {
      if (!event.has_snapshot()) {
        context->TryCancel();
        reader->Finish();
        return absl::InternalError("WatchJob: the stream did not start with a snapshot");
      }
      last = event.sequence();
      history.push_back(event);
      if (last > 0) continue;  // the events it includes follow
      complete = true;
      break;
    }
    if (event.sequence() <= last) history.push_back(event);
    if (event.sequence() >= last) {
      complete = true;
      break;
    }
  }
  if (complete) context->TryCancel();
  const grpc::Status status = reader->Finish();
  if (complete) return history;
  if (!status.ok()) return client.Convert(status, "WatchJob", context.get());
  if (history.empty()) return absl::InternalError("WatchJob: the stream ended without a snapshot");
  return history;  // a finished job's stream ends by itself after its last event
}

absl::StatusOr<std::string> LossCurvesSvg(const std::vector<v1::JobEvent>& history,
                                          const std::string& title) {
  std::map<int64_t, double> training;  // round → loss (a recomputed round keeps its last value)
  std::map<int64_t, double> held_out;
  for (const v1::JobEvent& event : history) {
    if (event.has_round_completed())
      training[event.round_completed().round()] = event.round_completed().loss();
    if (event.has_evaluation()) held_out[event.evaluation().round()] = event.evaluation().loss();
  }
  if (training.empty() && held_out.empty()) {
    return absl::FailedPreconditionError(
        "no round has completed and no evaluation has run yet: nothing to draw");
  }
  base::Chart chart;
  chart.title = title;
  chart.x_label = "round";
  chart.y_label = "loss (nats per token)";
  base::ChartSeries train{"training loss", base::SeriesStyle::kLine, "#1f77b4", {}};
  for (const auto& [round, loss] : training) train.points.emplace_back(static_cast<double>(round), loss);
  base::ChartSeries eval_line{"held-out loss", base::SeriesStyle::kLine, "#d62728", {}};
  for (const auto& [round, loss] : held_out) eval_line.points.emplace_back(static_cast<double>(round), loss);
  base::ChartSeries eval_points{"evaluations", base::SeriesStyle::kMarker, "#d62728", eval_line.points};
  if (!train.points.empty()) chart.series.push_back(std::move(train));
  if (!eval_line.points.empty()) {
    chart.series.push_back(std::move(eval_line));
    chart.series.push_back(std::move(eval_points));
  }
  return base::RenderSvg(chart);
}

}  // namespace slimfit::client
