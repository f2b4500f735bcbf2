// Charts as self-contained SVG text, drawn by our own code (no scripts, fonts or styles fetched):
// x/y axes with "nice" ticks (linear or log10), series drawn as points, lines or large markers,
// vertical rules (e.g. a memory budget) and a legend. Used by `slimfit plan --svg` for a device's
// memory/time frontier; text is XML-escaped.
//
// Example:
//   Chart chart;
//   chart.title = "w-3f2a: plans for L = 4096";
//   chart.x_label = "predicted peak (MiB)";
//   chart.log_x = true;
//   chart.series.push_back({"candidates", SeriesStyle::kPoints, "#999999", points});
//   chart.rules.push_back({"budget 512 MiB", 512, "#cc0000"});
//   std::string svg = RenderSvg(chart);
//
// Thread safety: pure functions.
#ifndef SLIMFIT_BASE_SVG_CHART_H_
#define SLIMFIT_BASE_SVG_CHART_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace slimfit::base {

enum class SeriesStyle { kPoints, kLine, kMarker };

struct ChartSeries {
  std::string name;  // legend entry
  SeriesStyle style = SeriesStyle::kPoints;
  std::string color = "#1f77b4";
  std::vector<std::pair<double, double>> points;  // (x, y)
};

struct ChartRule {  // a vertical line at x
  std::string label;
  double x = 0;
  std::string color = "#cc0000";
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  bool log_y = false;
  std::vector<ChartSeries> series;
  std::vector<ChartRule> rules;
  int width = 720;
  int height = 440;
};

// INVALID_ARGUMENT when there is nothing to draw, a coordinate is not finite, or a log axis gets a
// value ≤ 0.
absl::StatusOr<std::string> RenderSvg(const Chart& chart);

// `text` with &, <, >, " and ' escaped for XML.
std::string XmlEscape(const std::string& text);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_SVG_CHART_H_
