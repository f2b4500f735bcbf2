#include "planner/plan_chart.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "planner/plan_search.h"

namespace slimfit::planner {
namespace {

PlanSearchResult Search(int64_t budget_bytes) {
  PlanSearchRequest request;
  request.workload.model.d_model = 256;
  request.workload.model.layers = 2;
  request.workload.model.heads = 4;
  request.workload.model.d_ff = 1024;
  request.workload.seq_len = 4096;
  request.memory_budget_bytes = budget_bytes;
  DeviceProfile profile;
  profile.flops_per_second = 3e11;
  profile.half_rate_rows = 50;
  profile.seconds_per_element = 1e-9;
  profile.layer_overhead_s = 2e-4;
  absl::StatusOr<PlanSearchResult> result = SearchPlans(request, profile);
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

int Count(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

TEST(PlanFrontierSvg, DrawsEveryCandidateTheChoiceAndTheBudget) {
  const int64_t budget = int64_t{32} << 20;
  const PlanSearchResult result = Search(budget);
  absl::StatusOr<std::string> svg = PlanFrontierSvg(result, budget, budget * 9 / 10, "w-1 <plans>");
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_EQ(svg->rfind("<svg", 0), 0u) << svg->substr(0, 80);
  EXPECT_NE(svg->find("w-1 &lt;plans&gt;"), std::string::npos);  // the title, escaped
  EXPECT_NE(svg->find(absl::StrCat(result.candidate_points.size(), " candidates")), std::string::npos);
  EXPECT_NE(svg->find("Pareto frontier"), std::string::npos);
  EXPECT_NE(svg->find(absl::StrCat("chosen: ", PlanSummary(result.chosen.plan))), std::string::npos);
  EXPECT_NE(svg->find("full back-propagation"), std::string::npos);
  EXPECT_NE(svg->find("budget 32.0 MiB"), std::string::npos);
  EXPECT_NE(svg->find(">usable<"), std::string::npos);
  EXPECT_GE(Count(*svg, "<circle"), static_cast<int>(result.candidate_points.size()));
}

TEST(PlanFrontierSvg, NoUsableRuleWithoutAMargin) {
  const int64_t budget = int64_t{64} << 20;
  absl::StatusOr<std::string> svg = PlanFrontierSvg(Search(budget), budget, budget, "plans");
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_EQ(svg->find(">usable<"), std::string::npos);
}

}  // namespace
}  // namespace slimfit::planner
