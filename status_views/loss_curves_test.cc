#include "status_views/loss_curves.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace slimfit::status_views {
namespace {

v1::JobEvent Round(int64_t round, double loss) {
  v1::JobEvent event;
  event.mutable_round_completed()->set_round(round);
  event.mutable_round_completed()->set_loss(loss);
  return event;
}

v1::JobEvent Evaluation(int64_t round, double loss) {
  v1::JobEvent event;
  event.mutable_evaluation()->set_round(round);
  event.mutable_evaluation()->set_loss(loss);
  return event;
}

TEST(LossCurvesSvg, DrawsTrainingAndHeldOutCurves) {
  std::vector<v1::JobEvent> events = {Evaluation(0, 5.5), Round(1, 5.4), Round(2, 4.0), Evaluation(2, 4.2)};
  v1::JobEvent snapshot;
  snapshot.mutable_snapshot()->set_job_id("job-000001");
  events.insert(events.begin(), snapshot);
  absl::StatusOr<std::string> svg = LossCurvesSvg(events, "job-000001 <loss>");
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_EQ(svg->rfind("<svg", 0), 0u);
  EXPECT_NE(svg->find("job-000001 &lt;loss&gt;"), std::string::npos);
  EXPECT_NE(svg->find("training loss"), std::string::npos);
  EXPECT_NE(svg->find("held-out loss"), std::string::npos);
  EXPECT_NE(svg->find("<polyline"), std::string::npos);
}

TEST(LossCurvesSvg, ARecomputedRoundCountsOnceWithItsLastValue) {
  // Round 2 computed twice (a rollback): the curve has two training points, the second at 3.0.
  const std::vector<v1::JobEvent> once = {Round(1, 5.0), Round(2, 3.0)};
  const std::vector<v1::JobEvent> twice = {Round(1, 5.0), Round(2, 9.0), Round(2, 3.0)};
  absl::StatusOr<std::string> a = LossCurvesSvg(once, "t");
  absl::StatusOr<std::string> b = LossCurvesSvg(twice, "t");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(LossCurvesSvg, NothingToDrawYet) {
  v1::JobEvent snapshot;
  snapshot.mutable_snapshot()->set_job_id("job-000001");
  EXPECT_EQ(LossCurvesSvg({snapshot}, "t").status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace slimfit::status_views
