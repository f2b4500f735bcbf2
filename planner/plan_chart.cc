#include "planner/plan_chart.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/svg_chart.h"

namespace slimfit::planner {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::pair<double, double> Point(const PlanCandidate& candidate) {
  return {static_cast<double>(candidate.prediction.peak_bytes) / kMiB, candidate.prediction.seconds};
}

}  // namespace

absl::StatusOr<std::string> PlanFrontierSvg(const PlanSearchResult& result, int64_t budget_bytes,
                                            int64_t usable_bytes, const std::string& title) {
  base::Chart chart;
  chart.title = title;
  chart.x_label = "predicted peak memory (MiB, log scale)";
  chart.y_label = "predicted seconds per sequence";
  chart.log_x = true;
  base::ChartSeries candidates{
      absl::StrCat(result.candidate_points.size(), " candidates"), base::SeriesStyle::kPoints, "#9e9e9e", {}};
  for (const auto& [peak, seconds] : result.candidate_points) {
    candidates.points.emplace_back(static_cast<double>(peak) / kMiB, seconds);
  }
  base::ChartSeries frontier{"Pareto frontier", base::SeriesStyle::kLine, "#1f77b4", {}};
  for (const PlanCandidate& candidate : result.frontier) frontier.points.push_back(Point(candidate));
  chart.series.push_back(std::move(candidates));
  chart.series.push_back(std::move(frontier));
  chart.series.push_back(
      {"full back-propagation", base::SeriesStyle::kMarker, "#ff7f0e", {Point(result.full_backprop)}});
  chart.series.push_back({absl::StrCat("chosen: ", PlanSummary(result.chosen.plan)),
                          base::SeriesStyle::kMarker,
                          "#d62728",
                          {Point(result.chosen)}});
  chart.rules.push_back({absl::StrCat("budget ", HumanBytes(static_cast<double>(budget_bytes))),
                         static_cast<double>(budget_bytes) / kMiB, "#b71c1c"});
  if (usable_bytes < budget_bytes) {
    chart.rules.push_back({"usable", static_cast<double>(usable_bytes) / kMiB, "#e57373"});
  }
  return base::RenderSvg(chart);
}

}  // namespace slimfit::planner
