#include "base/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace slimfit::base {
namespace {

constexpr double kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;

// One axis: data range → pixels, with its ticks.
class Axis {
 public:
  Axis(double lo, double hi, bool log, double from_px, double to_px) : log_(log), from_(from_px), to_(to_px) {
    if (log_) {
      lo_ = std::floor(std::log10(lo));
      hi_ = std::ceil(std::log10(hi));
      if (hi_ == lo_) hi_ = lo_ + 1;
    } else {
      const double span = hi > lo ? hi - lo : std::max(std::abs(hi), 1.0);
      step_ = NiceStep(span / 5);
      lo_ = std::floor((hi > lo ? lo : lo - span / 2) / step_) * step_;
      hi_ = std::ceil((hi > lo ? hi : hi + span / 2) / step_) * step_;
    }
  }

  double Pixel(double value) const {
    const double v = log_ ? std::log10(value) : value;
    return from_ + (v - lo_) / (hi_ - lo_) * (to_ - from_);
  }

  std::vector<double> Ticks() const {
    std::vector<double> ticks;
    if (log_) {
      for (double e = lo_; e <= hi_ + 1e-9; e += 1) ticks.push_back(std::pow(10.0, e));
    } else {
      for (double v = lo_; v <= hi_ + step_ * 1e-9; v += step_)
        ticks.push_back(std::abs(v) < step_ * 1e-9 ? 0 : v);
    }
    return ticks;
  }

 private:
  static double NiceStep(double raw) {
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * magnitude >= raw) return m * magnitude;
    }
    return 10 * magnitude;
  }

  bool log_;
  double from_, to_;
  double lo_ = 0, hi_ = 1, step_ = 1;
};

std::string TickText(double value) { return absl::StrFormat("%.4g", value); }

}  // namespace

std::string XmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

absl::StatusOr<std::string> RenderSvg(const Chart& chart) {
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  auto take = [&](double x, double y, bool has_y) -> absl::Status {
    if (!std::isfinite(x) || (has_y && !std::isfinite(y))) {
      return absl::InvalidArgumentError("chart: a coordinate is not finite");
    }
    if ((chart.log_x && x <= 0) || (has_y && chart.log_y && y <= 0)) {
      return absl::InvalidArgumentError("chart: a log axis needs positive values");
    }
    x_lo = std::min(x_lo, x);
    x_hi = std::max(x_hi, x);
    if (has_y) {
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
    return absl::OkStatus();
  };
  for (const ChartSeries& series : chart.series) {
    for (const auto& [x, y] : series.points) {
      if (absl::Status s = take(x, y, true); !s.ok()) return s;
    }
  }
  if (!std::isfinite(y_lo)) return absl::InvalidArgumentError("chart: no points to draw");
  for (const ChartRule& rule : chart.rules) {
    if (absl::Status s = take(rule.x, 0, false); !s.ok()) return s;
  }

  const double w = chart.width, h = chart.height;
  const Axis x_axis(x_lo, x_hi, chart.log_x, kLeft, w - kRight);
  const Axis y_axis(y_lo, y_hi, chart.log_y, h - kBottom, kTop);
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n",
      chart.width, chart.height, chart.width, chart.height);
  absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"22\" font-size=\"15\">%s</text>\n", kLeft,
                        XmlEscape(chart.title));
  // Axes, ticks and grid.
  absl::StrAppendFormat(&svg, "<g stroke=\"#444\"><line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/>", kLeft,
                        h - kBottom, w - kRight, h - kBottom);
  absl::StrAppendFormat(&svg, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/></g>\n", kLeft, kTop, kLeft,
                        h - kBottom);
  for (double tick : x_axis.Ticks()) {
    const double px = x_axis.Pixel(tick);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#eee\"/>"
                          "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n",
                          px, kTop, px, h - kBottom, px, h - kBottom + 16, TickText(tick));
  }
  for (double tick : y_axis.Ticks()) {
    const double py = y_axis.Pixel(tick);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#eee\"/>"
                          "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          kLeft, py, w - kRight, py, kLeft - 6, py + 4, TickText(tick));
  }
  absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>\n",
                        (kLeft + w - kRight) / 2, h - 12, XmlEscape(chart.x_label));
  absl::StrAppendFormat(
      &svg, "<text x=\"16\" y=\"%g\" text-anchor=\"middle\" transform=\"rotate(-90 16 %g)\">%s</text>\n",
      (kTop + h - kBottom) / 2, (kTop + h - kBottom) / 2, XmlEscape(chart.y_label));
  // Rules, then series (later series on top), then the legend.
  for (const ChartRule& rule : chart.rules) {
    const double px = x_axis.Pixel(rule.x);
    absl::StrAppendFormat(&svg,
                          "<line class=\"rule\" x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"%s\" "
                          "stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%g\" fill=\"%s\">%s</text>\n",
                          px, kTop, px, h - kBottom, XmlEscape(rule.color), px + 4, kTop + 12,
                          XmlEscape(rule.color), XmlEscape(rule.label));
  }
  for (const ChartSeries& series : chart.series) {
    const std::string color = XmlEscape(series.color);
    if (series.style == SeriesStyle::kLine) {
      std::string points;
      for (const auto& [x, y] : series.points)
        absl::StrAppendFormat(&points, "%.1f,%.1f ", x_axis.Pixel(x), y_axis.Pixel(y));
      absl::StrAppendFormat(
          &svg, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n", color, points);
      continue;
    }
    const double radius = series.style == SeriesStyle::kMarker ? 6 : 2.5;
    for (const auto& [x, y] : series.points) {
      absl::StrAppendFormat(
          &svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%g\" fill=\"%s\"%s/>\n", x_axis.Pixel(x),
          y_axis.Pixel(y), radius, color,
          series.style == SeriesStyle::kMarker ? " stroke=\"black\"" : " fill-opacity=\"0.5\"");
    }
  }
  double legend_y = kTop + 4;
  for (const ChartSeries& series : chart.series) {
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%g\" y=\"%g\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                          "<text x=\"%g\" y=\"%g\">%s</text>\n",
                          w - kRight - 190, legend_y, XmlEscape(series.color), w - kRight - 175, legend_y + 9,
                          XmlEscape(series.name));
    legend_y += 16;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace slimfit::base
