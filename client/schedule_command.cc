#include "client/schedule_command.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "nlohmann/json.hpp"
#include "planner/bptt_schedule.h"

namespace slimfit::client {
namespace {

using performer::ScheduleKind;
using performer::ScheduleStats;
using planner::BpttPolicy;
using planner::Schedule;

struct ScheduleOptions {
  int64_t steps = 0;
  int64_t slots = 0;
  std::string kind = "hsm";
  double alpha = 0;
  double beta = 0;
  bool actions = false;
  bool json = false;
};

struct ScheduleReport {
  ScheduleKind kind = ScheduleKind::kHsm;
  ScheduleOptions options;
  int64_t cost = 0;
  std::optional<Schedule> schedule;    // absent when too long to generate
  std::optional<ScheduleStats> stats;  // with `schedule`
  std::string unavailable_reason;      // why `schedule` is absent
};

absl::StatusOr<ScheduleReport> BuildReport(const ScheduleOptions& options) {
  ScheduleReport report;
  report.options = options;
  absl::StatusOr<ScheduleKind> kind = performer::ParseScheduleKind(options.kind);
  if (!kind.ok()) return kind.status();
  report.kind = *kind;
  absl::StatusOr<BpttPolicy> policy =
      BpttPolicy::Create(*kind, options.steps, options.slots, options.alpha, options.beta);
  if (!policy.ok()) return policy.status();
  absl::StatusOr<int64_t> cost = policy->Cost(options.steps, options.slots);
  if (!cost.ok()) return cost.status();
  report.cost = *cost;
  absl::StatusOr<Schedule> schedule = policy->MakeSchedule(options.steps, options.slots);
  if (!schedule.ok()) {
    if (schedule.status().code() != absl::StatusCode::kResourceExhausted || options.actions) {
      return schedule.status();
    }
    report.unavailable_reason = std::string(schedule.status().message());
    return report;
  }
  absl::StatusOr<ScheduleStats> stats = performer::SimulateSchedule(*schedule, options.steps, options.slots);
  if (!stats.ok()) return stats.status();
  report.schedule = *std::move(schedule);
  report.stats = *stats;
  return report;
}

double OverheadFraction(const ScheduleReport& report) {
  return static_cast<double>(report.cost - report.options.steps) / static_cast<double>(report.options.steps);
}

std::string FormatText(const ScheduleReport& report) {
  const ScheduleOptions& o = report.options;
  std::string text;
  auto line = [&text](absl::string_view label, const std::string& value) {
    absl::StrAppendFormat(&text, "%-16s%s\n", label, value);
  };
  std::string what =
      absl::StrCat(performer::ScheduleKindName(report.kind), ", T = ", o.steps,
                   o.steps == 1 ? " slice" : " slices", ", M = ", o.slots, o.slots == 1 ? " slot" : " slots");
  if (report.kind == ScheduleKind::kMsm) {
    absl::StrAppendFormat(&what, ", alpha = %g, beta = %g fronts", o.alpha, o.beta);
  }
  line("schedule", what);
  line("cost C(T,M)", absl::StrCat(report.cost, " slice forwards"));
  line("ordinary BPTT", absl::StrCat(o.steps, " slice forwards (keeps all ", o.steps, " slice graphs)"));
  line("overhead C - T",
       absl::StrFormat("%d (+%.1f%%)", report.cost - o.steps, 100 * OverheadFraction(report)));
  if (report.stats.has_value()) {
    const ScheduleStats& s = *report.stats;
    line("peak kept", absl::StrCat(s.peak_kept_fronts, " fronts, ", s.peak_kept_graphs, " slice graphs (",
                                   s.peak_units, " of ", o.slots, " units)"));
    line("actions", absl::StrCat(report.schedule->actions.size()));
  } else {
    line("peak kept", absl::StrCat("- (", report.unavailable_reason, ")"));
    line("actions", "-");
  }
  if (o.actions && report.schedule.has_value()) {
    absl::StrAppend(&text, "\n");
    for (const performer::ScheduleAction& action : report.schedule->actions) {
      absl::StrAppend(&text, performer::ScheduleActionToString(action), "\n");
    }
  }
  return text;
}

nlohmann::ordered_json ToJson(const ScheduleReport& report) {
  const ScheduleOptions& o = report.options;
  nlohmann::ordered_json json;
  json["kind"] = std::string(performer::ScheduleKindName(report.kind));
  json["steps"] = o.steps;
  json["slots"] = o.slots;
  if (report.kind == ScheduleKind::kMsm) {
    json["alpha"] = o.alpha;
    json["beta"] = o.beta;
  }
  json["cost"] = report.cost;
  json["bptt_cost"] = o.steps;
  json["overhead"] = report.cost - o.steps;
  json["overhead_fraction"] = OverheadFraction(report);
  if (report.stats.has_value()) {
    json["peak_kept_fronts"] = report.stats->peak_kept_fronts;
    json["peak_kept_graphs"] = report.stats->peak_kept_graphs;
    json["peak_units"] = report.stats->peak_units;
    json["action_count"] = report.schedule->actions.size();
  } else {
    for (const char* key : {"peak_kept_fronts", "peak_kept_graphs", "peak_units", "action_count"}) {
      json[key] = nullptr;
    }
    json["unavailable_reason"] = report.unavailable_reason;
  }
  if (o.actions && report.schedule.has_value()) {
    nlohmann::ordered_json actions = nlohmann::ordered_json::array();
    for (const performer::ScheduleAction& action : report.schedule->actions) {
      actions.push_back(performer::ScheduleActionToString(action));
    }
    json["actions"] = std::move(actions);
  }
  return json;
}

}  // namespace

absl::Status RunScheduleCommand(absl::Span<const std::string> args, std::ostream& out) {
  ScheduleOptions options;
  base::FlagSet flags(
      "schedule",
      "slimfit schedule --steps=T --slots=M [--kind=hsm|ism|msm] [--alpha=A --beta=B] "
      "[--actions] [--json]",
      "The optimal BPTT checkpoint schedule of Gruslys et al. (2016) for back-propagating through\n"
      "T slices with at most M memory slots: its cost C(T,M) in slice forwards (ordinary BPTT\n"
      "costs T), the overhead C - T, and the most fronts and slice graphs it keeps at once.");
  flags.Int("steps", &options.steps, "slices T to back-propagate through", base::FlagSet::kRequired);
  flags.Int("slots", &options.slots, "memory budget M in the program's units (fronts)",
            base::FlagSet::kRequired);
  flags.String("kind", &options.kind, "program: hsm (keeps fronts), ism (keeps slice graphs) or msm (both)");
  flags.Double("alpha", &options.alpha, "msm: size of a slice graph with its input front, in fronts (>= 1)");
  flags.Double("beta", &options.beta,
               "msm: size of a slice graph whose input front is held anyway (0 < beta <= alpha)");
  flags.Bool("actions", &options.actions, "also list the schedule's actions, one per line");
  flags.Bool("json", &options.json, "print one JSON object instead of text");
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help_requested()) {
    out << flags.Help();
    return absl::OkStatus();
  }
  if (options.kind != "msm" && (flags.IsSet("alpha") || flags.IsSet("beta"))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--alpha and --beta apply only to --kind=msm (got --kind=", options.kind, ")"));
  }
  if (options.kind == "msm" && (!flags.IsSet("alpha") || !flags.IsSet("beta"))) {
    return absl::InvalidArgumentError(
        "--kind=msm needs --alpha and --beta (slice-graph sizes in fronts; see --help)");
  }
  absl::StatusOr<ScheduleReport> report = BuildReport(options);
  if (!report.ok()) return report.status();
  if (options.json) {
    out << ToJson(*report).dump(2) << "\n";
  } else {
    out << FormatText(*report);
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
