#include "client/schedule_command.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/bptt_schedule.h"

namespace slimfit::client {
namespace {

using performer::ScheduleKind;
using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

absl::StatusOr<std::string> RunCommand(std::vector<std::string> args) {
  std::ostringstream out;
  if (absl::Status s = RunScheduleCommand(args, out); !s.ok()) return s;
  return out.str();
}

// Lines of `text` from the first empty line on (the action list).
std::vector<std::string> ActionLines(const std::string& text) {
  const size_t blank = text.find("\n\n");
  if (blank == std::string::npos) return {};
  return absl::StrSplit(text.substr(blank + 2), '\n', absl::SkipEmpty());
}

TEST(ScheduleCommandTest, TextCostMatchesOptimalCostForSmallProblems) {
  for (const char* kind : {"hsm", "ism"}) {
    for (int64_t steps = 1; steps <= 6; ++steps) {
      for (int64_t slots = 1; slots <= 3; ++slots) {
        absl::StatusOr<ScheduleKind> parsed = performer::ParseScheduleKind(kind);
        ASSERT_TRUE(parsed.ok());
        absl::StatusOr<int64_t> cost = planner::OptimalCost(*parsed, steps, slots, 0, 0);
        ASSERT_TRUE(cost.ok()) << cost.status();
        absl::StatusOr<std::string> text =
            RunCommand({absl::StrCat("--steps=", steps), absl::StrCat("--slots=", slots),
                        absl::StrCat("--kind=", kind)});
        ASSERT_TRUE(text.ok()) << text.status();
        EXPECT_THAT(*text, HasSubstr(absl::StrCat("cost C(T,M)     ", *cost, " slice forwards\n")))
            << kind << " T=" << steps << " M=" << slots;
        EXPECT_THAT(*text, HasSubstr(absl::StrCat("overhead C - T  ", *cost - steps, " (")));
      }
    }
  }
}

TEST(ScheduleCommandTest, TextReportsPeaksFromTheSimulator) {
  absl::StatusOr<std::string> text = RunCommand({"--steps=1000", "--slots=8"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("schedule        hsm, T = 1000 slices, M = 8 slots\n"));
  EXPECT_THAT(*text, HasSubstr("cost C(T,M)     5285 slice forwards\n"));  // bptt_schedule.h
  EXPECT_THAT(*text, HasSubstr("ordinary BPTT   1000 slice forwards"));
  EXPECT_THAT(*text, HasSubstr("overhead C - T  4285 (+428.5%)\n"));
  EXPECT_THAT(*text, HasSubstr("peak kept       8 fronts, 0 slice graphs (8 of 8 units)\n"));
  EXPECT_TRUE(ActionLines(*text).empty());  // no action list without --actions
}

TEST(ScheduleCommandTest, ActionsListsEveryActionOfTheSchedule) {
  absl::StatusOr<planner::Schedule> schedule = planner::MakeSchedule(ScheduleKind::kHsm, 5, 2, 0, 0);
  ASSERT_TRUE(schedule.ok());
  absl::StatusOr<std::string> text = RunCommand({"--steps=5", "--slots=2", "--actions"});
  ASSERT_TRUE(text.ok()) << text.status();
  const std::vector<std::string> lines = ActionLines(*text);
  ASSERT_EQ(lines.size(), schedule->actions.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i], performer::ScheduleActionToString(schedule->actions[i])) << i;
  }
  EXPECT_THAT(*text, HasSubstr(absl::StrCat("actions         ", schedule->actions.size(), "\n")));
  EXPECT_EQ(lines.front(), "keep_front(0)");
}

TEST(ScheduleCommandTest, JsonShape) {
  absl::StatusOr<std::string> text = RunCommand({"--steps=6", "--slots=2", "--kind=ism", "--json"});
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json json = nlohmann::json::parse(*text);
  std::vector<std::string> keys;
  for (auto it = json.begin(); it != json.end(); ++it) keys.push_back(it.key());
  // nlohmann::json sorts keys; the set is what matters here.
  EXPECT_EQ(keys, (std::vector<std::string>{"action_count", "bptt_cost", "cost", "kind", "overhead",
                                            "overhead_fraction", "peak_kept_fronts", "peak_kept_graphs",
                                            "peak_units", "slots", "steps"}));
  absl::StatusOr<int64_t> cost = planner::OptimalCost(ScheduleKind::kIsm, 6, 2, 0, 0);
  ASSERT_TRUE(cost.ok());
  EXPECT_EQ(json["kind"], "ism");
  EXPECT_EQ(json["steps"], 6);
  EXPECT_EQ(json["slots"], 2);
  EXPECT_EQ(json["cost"], *cost);
  EXPECT_EQ(json["bptt_cost"], 6);
  EXPECT_EQ(json["overhead"], *cost - 6);
  EXPECT_EQ(json["peak_kept_fronts"], 0);  // ISM keeps slice graphs only
  EXPECT_LE(json["peak_kept_graphs"].get<int64_t>(), 2);
}

TEST(ScheduleCommandTest, JsonActionsArrayWithMsmSizes) {
  absl::StatusOr<planner::Schedule> schedule = planner::MakeSchedule(ScheduleKind::kMsm, 4, 2, 2, 1);
  ASSERT_TRUE(schedule.ok());
  absl::StatusOr<std::string> text =
      RunCommand({"--steps=4", "--slots=2", "--kind=msm", "--alpha=2", "--beta=1", "--json", "--actions"});
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json json = nlohmann::json::parse(*text);
  EXPECT_EQ(json["alpha"], 2.0);
  EXPECT_EQ(json["beta"], 1.0);
  EXPECT_EQ(json["cost"], schedule->forward_count);
  ASSERT_TRUE(json["actions"].is_array());
  ASSERT_EQ(json["actions"].size(), schedule->actions.size());
  EXPECT_EQ(json["action_count"], schedule->actions.size());
  for (size_t i = 0; i < schedule->actions.size(); ++i) {
    EXPECT_EQ(json["actions"][i], performer::ScheduleActionToString(schedule->actions[i]));
  }
}

TEST(ScheduleCommandTest, TooLongScheduleStillReportsTheCost) {
  absl::StatusOr<std::string> text = RunCommand({"--steps=65535", "--slots=1", "--json"});
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json json = nlohmann::json::parse(*text);
  EXPECT_EQ(json["cost"], int64_t{65535} * 65536 / 2);  // C(t, 1) = t(t+1)/2
  EXPECT_TRUE(json["peak_kept_fronts"].is_null());
  EXPECT_TRUE(json["action_count"].is_null());
  EXPECT_THAT(json["unavailable_reason"].get<std::string>(), HasSubstr("actions"));

  absl::StatusOr<std::string> with_actions = RunCommand({"--steps=65535", "--slots=1", "--actions"});
  EXPECT_EQ(with_actions.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ScheduleCommandTest, PlannerErrorsPropagate) {
  absl::StatusOr<std::string> text = RunCommand({"--steps=10", "--slots=0"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("slots"));

  text = RunCommand({"--steps=10", "--slots=2", "--kind=bogus"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("expected hsm, ism or msm"));

  text = RunCommand({"--steps=10", "--slots=2", "--kind=msm", "--alpha=0.5", "--beta=0.25"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("alpha"));
}

TEST(ScheduleCommandTest, FlagErrors) {
  absl::StatusOr<std::string> text = RunCommand({"--slots=2"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("missing --steps"));

  text = RunCommand({"--steps=4", "--slots=2", "--alpha=2"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--alpha and --beta apply only to --kind=msm"));

  text = RunCommand({"--steps=4", "--slots=2", "--kind=msm"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--kind=msm needs --alpha and --beta"));

  text = RunCommand({"--steps=4", "--slots=2", "--action"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("did you mean --actions?"));
}

TEST(ScheduleCommandTest, Help) {
  absl::StatusOr<std::string> text = RunCommand({"--help"});
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("usage: slimfit schedule --steps=T --slots=M"));
  EXPECT_THAT(*text, HasSubstr("--kind=TEXT"));
}

}  // namespace
}  // namespace slimfit::client
