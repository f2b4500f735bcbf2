// The machine checkpoint schedules run on: names, and the simulator accepting valid schedules and
// catching every broken rule. (The optimal programs that generate schedules are tested in
// //planner:bptt_schedule_test, and the engine running them in //planner:dp_gradient_test.)
#include "performer/checkpoint_schedule.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace slimfit::performer {
namespace {

using Type = ScheduleAction::Type;

TEST(CheckpointScheduleTest, ParseAndNames) {
  EXPECT_EQ(*ParseScheduleKind("hsm"), ScheduleKind::kHsm);
  EXPECT_EQ(*ParseScheduleKind("ism"), ScheduleKind::kIsm);
  EXPECT_EQ(*ParseScheduleKind("msm"), ScheduleKind::kMsm);
  EXPECT_EQ(ParseScheduleKind("HSM").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScheduleActionToString({Type::kKeepFront, 12}), "keep_front(12)");
  EXPECT_EQ(ScheduleActionTypeName(Type::kForwardKeepGraph), "forward_keep_graph");
}

// ---- The simulator catches broken schedules -----------------------------------------------------

Schedule HandMade(ScheduleKind kind, std::vector<ScheduleAction> actions, double alpha = 0, double beta = 0) {
  Schedule schedule;
  schedule.kind = kind;
  schedule.alpha = alpha;
  schedule.beta = beta;
  schedule.actions = std::move(actions);
  return schedule;
}

absl::StatusCode SimulateCode(const Schedule& schedule, int64_t steps, int64_t slots) {
  return SimulateSchedule(schedule, steps, slots).status().code();
}

TEST(CheckpointScheduleTest, SimulatorAcceptsHandMadeSchedules) {
  // Store every front (the `store` policy as an HSM schedule): 2t − 1 forwards.
  const Schedule store = HandMade(ScheduleKind::kHsm, {{Type::kKeepFront, 0},
                                                       {Type::kForward, 0},
                                                       {Type::kKeepFront, 1},
                                                       {Type::kForward, 1},
                                                       {Type::kForwardBackward, 2},
                                                       {Type::kRestore, 1},
                                                       {Type::kForwardBackward, 1},
                                                       {Type::kFreeFront, 1},
                                                       {Type::kRestore, 0},
                                                       {Type::kForwardBackward, 0},
                                                       {Type::kFreeFront, 0}});
  absl::StatusOr<ScheduleStats> stats = SimulateSchedule(store, 3, 2);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->forward_count, 5);
  EXPECT_EQ(stats->restore_count, 2);
  EXPECT_EQ(stats->peak_kept_fronts, 2);
  // MSM: a graph whose input front is kept costs β; dropping the front raises it to α.
  const Schedule msm = HandMade(ScheduleKind::kMsm,
                                {{Type::kKeepFront, 0},
                                 {Type::kForwardKeepGraph, 0},
                                 {Type::kForwardBackward, 1},
                                 {Type::kBackward, 0},
                                 {Type::kFreeFront, 0}},
                                /*alpha=*/4, /*beta=*/2);
  stats = SimulateSchedule(msm, 2, 3);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->peak_units, 3);
  const Schedule msm_dropped = HandMade(ScheduleKind::kMsm,
                                        {{Type::kKeepFront, 0},
                                         {Type::kForwardKeepGraph, 0},
                                         {Type::kFreeFront, 0},
                                         {Type::kForwardBackward, 1},
                                         {Type::kBackward, 0}},
                                        4, 2);
  EXPECT_EQ(SimulateCode(msm_dropped, 2, 3), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(SimulateSchedule(msm_dropped, 2, 4).ok());
}

TEST(CheckpointScheduleTest, SimulatorRejectsBrokenSchedules) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  // Backward out of order.
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kForwardBackward, 0}}), 2, 2), kInvalid);
  // Forward from a front the cursor does not hold.
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kForward, 1}}), 2, 2), kInvalid);
  // Forward after the cursor was consumed by a backward, without a restore.
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kKeepFront, 0},
                                                       {Type::kForward, 0},
                                                       {Type::kForwardBackward, 1},
                                                       {Type::kForwardBackward, 0}}),
                         2, 2),
            kInvalid);
  // Restore of a front nobody kept (HSM must keep f_0).
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm,
                                  {{Type::kForward, 0}, {Type::kForwardBackward, 1}, {Type::kRestore, 0}}),
                         2, 2),
            kInvalid);
  // ...but ISM reads f_0 for free.
  EXPECT_TRUE(SimulateSchedule(HandMade(ScheduleKind::kIsm, {{Type::kForward, 0},
                                                             {Type::kForwardBackward, 1},
                                                             {Type::kRestore, 0},
                                                             {Type::kForwardBackward, 0}}),
                               2, 1)
                  .ok());
  // Kinds: HSM keeps no graphs, ISM keeps no fronts.
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kForwardKeepGraph, 0}}), 1, 4), kInvalid);
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kIsm, {{Type::kKeepFront, 0}}), 1, 4), kInvalid);
  // Backward of a graph that is not kept; freeing a front that is not kept; keeping twice.
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kIsm, {{Type::kBackward, 0}}), 1, 4), kInvalid);
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kFreeFront, 0}}), 1, 4), kInvalid);
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kKeepFront, 0}, {Type::kKeepFront, 0}}), 1, 4),
            kInvalid);
  // Index out of range.
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kRestore, 9}}), 2, 4), kInvalid);
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kForward, -1}}), 2, 4), kInvalid);
  // Forward of a slice after its backward.
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kIsm, {{Type::kForwardKeepGraph, 0},
                                                       {Type::kForwardBackward, 1},
                                                       {Type::kRestore, 1},
                                                       {Type::kForward, 1}}),
                         2, 4),
            kInvalid);
  // Incomplete, and leaving memory kept.
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {}), 1, 1), kInvalid);
  EXPECT_EQ(
      SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kKeepFront, 0}, {Type::kForwardBackward, 0}}), 1, 1),
      kInvalid);
  // Over budget: ISM's kForwardBackward needs a free slot; HSM keeping three fronts in two.
  EXPECT_EQ(SimulateCode(
                HandMade(ScheduleKind::kIsm,
                         {{Type::kForwardKeepGraph, 0}, {Type::kForwardBackward, 1}, {Type::kBackward, 0}}),
                2, 1),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {{Type::kKeepFront, 0},
                                                       {Type::kForward, 0},
                                                       {Type::kKeepFront, 1},
                                                       {Type::kForward, 1},
                                                       {Type::kKeepFront, 2}}),
                         3, 2),
            absl::StatusCode::kResourceExhausted);
  // Bad arguments to the simulator itself.
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {}), 0, 1), kInvalid);
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kHsm, {}), 1, 0), kInvalid);
  EXPECT_EQ(SimulateCode(HandMade(ScheduleKind::kMsm, {}, 1, 2), 1, 1), kInvalid);
  // The message names the action.
  const absl::Status status =
      SimulateSchedule(HandMade(ScheduleKind::kHsm, {{Type::kForward, 1}}), 2, 2).status();
  EXPECT_NE(status.message().find("action 0 (forward(1))"), std::string::npos) << status;
}

TEST(CheckpointScheduleTest, GraphUnitsRoundUpAndClamp) {
  const GraphUnits msm = MakeGraphUnits(ScheduleKind::kMsm, 2.5, 1.2, 100);
  EXPECT_EQ(msm.full, 3);
  EXPECT_EQ(msm.shared, 2);
  EXPECT_EQ(msm.first[0], 2);
  EXPECT_EQ(msm.first[1], 2);
  EXPECT_FALSE(msm.share_first);
  const GraphUnits wide = MakeGraphUnits(ScheduleKind::kMsm, 9, 1, 100);
  EXPECT_TRUE(wide.share_first);  // β' + 1 < α'
  EXPECT_EQ(MakeGraphUnits(ScheduleKind::kMsm, 1e30, 1e30, 7).full, 7);
  EXPECT_EQ(MakeGraphUnits(ScheduleKind::kIsm, 0, 0, 100).full, 1);
}

}  // namespace
}  // namespace slimfit::performer
