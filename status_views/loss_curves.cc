#include "status_views/loss_curves.h"

#include <cstdint>
#include <map>
#include <utility>

#include "base/svg_chart.h"

namespace slimfit::status_views {

absl::StatusOr<std::string> LossCurvesSvg(const std::vector<v1::JobEvent>& events, const std::string& title) {
  std::map<int64_t, double> training;  // round → loss (a recomputed round keeps its last value)
  std::map<int64_t, double> held_out;
  for (const v1::JobEvent& event : events) {
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

}  // namespace slimfit::status_views
