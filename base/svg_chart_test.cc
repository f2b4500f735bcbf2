#include "base/svg_chart.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace slimfit::base {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

Chart Frontier() {
  Chart chart;
  chart.title = "plans for <L = 4096> & friends";
  chart.x_label = "predicted peak (MiB)";
  chart.y_label = "seconds per sequence";
  chart.log_x = true;
  chart.series.push_back({"candidates", SeriesStyle::kPoints, "#999999", {{3, 0.5}, {30, 0.2}, {300, 0.1}}});
  chart.series.push_back({"frontier", SeriesStyle::kLine, "#1f77b4", {{3, 0.5}, {30, 0.2}}});
  chart.series.push_back({"chosen", SeriesStyle::kMarker, "#d62728", {{30, 0.2}}});
  chart.rules.push_back({"budget 64 MiB", 64, "#cc0000"});
  return chart;
}

TEST(SvgChartTest, DrawsEveryPointLineRuleAndLegendEntry) {
  absl::StatusOr<std::string> svg = RenderSvg(Frontier());
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_EQ(svg->rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(Count(*svg, "<circle"), 4u);  // three candidates and the chosen marker
  EXPECT_EQ(Count(*svg, "<polyline"), 1u);
  EXPECT_EQ(Count(*svg, "class=\"rule\""), 1u);
  EXPECT_THAT(*svg, HasSubstr(">budget 64 MiB<"));
  EXPECT_THAT(*svg, HasSubstr(">candidates<"));
  EXPECT_THAT(*svg, HasSubstr(">chosen<"));
  // Log axis: decades from 1 to 1000 as ticks.
  for (const char* tick : {">1<", ">10<", ">100<", ">1000<"}) EXPECT_THAT(*svg, HasSubstr(tick));
  EXPECT_THAT(*svg, HasSubstr("</svg>"));
  EXPECT_THAT(*svg, Not(HasSubstr("<script")));
}

TEST(SvgChartTest, TextIsEscaped) {
  absl::StatusOr<std::string> svg = RenderSvg(Frontier());
  ASSERT_TRUE(svg.ok());
  EXPECT_THAT(*svg, HasSubstr("plans for &lt;L = 4096&gt; &amp; friends"));
  EXPECT_THAT(*svg, Not(HasSubstr("<L = 4096>")));
  EXPECT_EQ(XmlEscape("a\"b'c"), "a&quot;b&apos;c");
}

TEST(SvgChartTest, PointsLieInsideThePlotArea) {
  Chart chart = Frontier();
  absl::StatusOr<std::string> svg = RenderSvg(chart);
  ASSERT_TRUE(svg.ok());
  for (absl::string_view line : absl::StrSplit(*svg, '\n')) {
    if (!absl::StartsWith(line, "<circle")) continue;
    double cx = 0, cy = 0;
    ASSERT_EQ(std::sscanf(std::string(line).c_str(), "<circle cx=\"%lf\" cy=\"%lf\"", &cx, &cy), 2) << line;
    EXPECT_GE(cx, 70);
    EXPECT_LE(cx, chart.width - 20);
    EXPECT_GE(cy, 40);
    EXPECT_LE(cy, chart.height - 50);
  }
}

TEST(SvgChartTest, RefusesWhatItCannotDraw) {
  Chart empty;
  EXPECT_EQ(RenderSvg(empty).status().code(), absl::StatusCode::kInvalidArgument);
  Chart negative = Frontier();
  negative.series[0].points.push_back({-1, 0.3});
  EXPECT_EQ(RenderSvg(negative).status().code(), absl::StatusCode::kInvalidArgument);
  Chart nan = Frontier();
  nan.log_x = false;
  nan.series[0].points.push_back({1, std::nan("")});
  EXPECT_EQ(RenderSvg(nan).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SvgChartTest, ASingleValueStillGetsAnAxis) {
  Chart flat;
  flat.series.push_back({"one", SeriesStyle::kMarker, "#000000", {{5, 2}}});
  absl::StatusOr<std::string> svg = RenderSvg(flat);
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_EQ(Count(*svg, "<circle"), 1u);
}

}  // namespace
}  // namespace slimfit::base
