#include "status_views/status_render.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/human_format.h"
#include "base/svg_chart.h"
#include "planner/plan_proto.h"
#include "planner/plan_search.h"
#include "status_views/loss_curves.h"

namespace slimfit::status_views {
namespace {

using base::XmlEscape;

std::string Short(const std::string& name, absl::string_view prefix) {
  return absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name;
}
std::string StateName(v1::WorkerState state) { return Short(v1::WorkerState_Name(state), "WORKER_STATE_"); }
std::string StateName(v1::JobState state) { return Short(v1::JobState_Name(state), "JOB_STATE_"); }

bool Terminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string Bytes(int64_t bytes) { return planner::HumanBytes(static_cast<double>(bytes)); }

std::string Loss(bool has, double loss) { return has ? absl::StrFormat("%.4f", loss) : "-"; }

std::string Age(const google::protobuf::Timestamp& time, absl::Time now) {
  if (time.seconds() == 0 && time.nanos() == 0) return "-";
  const absl::Time then = absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos());
  if (then >= now) return "now";
  return absl::StrCat(base::FormatDuration(absl::ToDoubleSeconds(now - then)), " ago");
}

// "measured / predicted" with the ratio when both are known.
std::string Versus(const std::string& measured, const std::string& predicted, std::optional<double> ratio) {
  std::string text = absl::StrCat(measured, " / ", predicted);
  if (ratio.has_value()) absl::StrAppendFormat(&text, " (%.2f×)", *ratio);
  return text;
}

std::string PeakVersus(const v1::WorkerJobPlan& plan) {
  const int64_t predicted = plan.plan().prediction().peak_bytes();
  if (!plan.has_measured_peak_bytes()) return Versus("-", Bytes(predicted), std::nullopt);
  std::optional<double> ratio;
  if (predicted > 0) ratio = static_cast<double>(plan.measured_peak_bytes()) / static_cast<double>(predicted);
  return Versus(Bytes(plan.measured_peak_bytes()), Bytes(predicted), ratio);
}

std::string SpeedVersus(const v1::WorkerJobPlan& plan) {
  const double predicted = plan.predicted_tokens_per_second();
  if (!plan.has_measured_tokens_per_second()) return Versus("-", base::FormatRate(predicted), std::nullopt);
  std::optional<double> ratio;
  if (predicted > 0) ratio = plan.measured_tokens_per_second() / predicted;
  return Versus(base::FormatRate(plan.measured_tokens_per_second()), base::FormatRate(predicted), ratio);
}

std::string Cell(const std::string& text) { return absl::StrCat("<td>", XmlEscape(text), "</td>"); }

std::string JobLabel(const v1::Job& job) {
  return job.spec().name().empty() || job.spec().name() == job.job_id()
             ? job.job_id()
             : absl::StrCat(job.job_id(), " \"", job.spec().name(), "\"");
}

void Summary(const StatusSnapshot& snapshot, std::string* html) {
  std::map<std::string, int> workers;
  for (const v1::WorkerInfo& worker : snapshot.workers) ++workers[StateName(worker.state())];
  std::map<std::string, int> jobs;
  for (const v1::Job& job : snapshot.jobs) ++jobs[StateName(job.state())];
  std::vector<std::string> worker_parts;
  for (const auto& [state, count] : workers) worker_parts.push_back(absl::StrCat(count, " ", state));
  std::vector<std::string> job_parts;
  for (const auto& [state, count] : jobs) job_parts.push_back(absl::StrCat(count, " ", state));
  absl::StrAppend(html, "<section id=\"summary\"><p>Workers: ",
                  XmlEscape(worker_parts.empty() ? "none yet" : absl::StrJoin(worker_parts, ", ")),
                  ". Jobs: ", XmlEscape(job_parts.empty() ? "none yet" : absl::StrJoin(job_parts, ", ")),
                  ". As of ",
                  XmlEscape(absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", snapshot.now, absl::UTCTimeZone())),
                  ".</p></section>\n");
}

void Workers(const StatusSnapshot& snapshot, std::string* html) {
  absl::StrAppend(html,
                  "<section id=\"workers\"><h2>Workers</h2>\n<table><thead><tr><th>worker</th><th>state</th>"
                  "<th>device</th><th>budget</th><th>measured peak</th><th>threads</th><th>now</th>"
                  "<th>shards done / failed</th><th>heartbeat</th></tr></thead><tbody>\n");
  for (const v1::WorkerInfo& worker : snapshot.workers) {
    std::string device = worker.device();
    if (!worker.device_name().empty() && worker.device_name() != device) {
      absl::StrAppend(&device, " (", worker.device_name(), ")");
    }
    std::string now = "idle";
    if (worker.has_current_work()) {
      const v1::CurrentWork& work = worker.current_work();
      now = absl::StrCat(work.job_id(), " round ", work.round(), " shard ", work.shard_id(),
                         work.attempt() > 1 ? absl::StrCat(" (attempt ", work.attempt(), ")") : "");
    }
    const std::string state = StateName(worker.state());
    absl::StrAppend(html, "<tr class=\"worker\" data-worker-id=\"", XmlEscape(worker.worker_id()),
                    "\" data-state=\"", XmlEscape(state), "\">", Cell(worker.worker_id()),
                    "<td class=\"state ", XmlEscape(state), "\">", XmlEscape(state), "</td>", Cell(device),
                    Cell(Bytes(worker.memory_budget_bytes())),
                    Cell(worker.measured_peak_bytes() > 0 ? Bytes(worker.measured_peak_bytes()) : "-"),
                    Cell(absl::StrCat(worker.threads())), Cell(now),
                    Cell(absl::StrCat(worker.shards_completed(), " / ", worker.shards_failed())),
                    Cell(Age(worker.last_heartbeat_at(), snapshot.now)), "</tr>\n");
    for (const v1::WorkerJobPlan& plan : worker.plans()) {
      absl::StrAppend(html, "<tr class=\"worker-plan\" data-worker-id=\"", XmlEscape(worker.worker_id()),
                      "\" data-job-id=\"", XmlEscape(plan.job_id()), "\"><td></td><td colspan=\"8\">",
                      XmlEscape(plan.job_id()), ": ", XmlEscape(planner::PlanSummaryOf(plan.plan().plan())),
                      " — peak ", XmlEscape(PeakVersus(plan)), " measured / predicted; ",
                      XmlEscape(SpeedVersus(plan)), "</td></tr>\n");
    }
    for (const v1::Quarantine& quarantine : worker.quarantines()) {
      absl::StrAppend(html, "<tr class=\"worker-quarantine\"><td></td><td colspan=\"8\">quarantined from ",
                      XmlEscape(quarantine.job_id()), ": ", XmlEscape(quarantine.reason()), "</td></tr>\n");
    }
  }
  if (snapshot.workers.empty()) {
    absl::StrAppend(html, "<tr><td colspan=\"9\">No worker has registered yet.</td></tr>\n");
  }
  absl::StrAppend(html, "</tbody></table></section>\n");
}

void Jobs(const StatusSnapshot& snapshot, std::string* html) {
  absl::StrAppend(html,
                  "<section id=\"jobs\"><h2>Jobs</h2>\n<table><thead><tr><th>job</th><th>state</th>"
                  "<th>progress</th><th>loss</th><th>held-out loss</th><th>speed</th><th>ETA</th>"
                  "<th>workers</th></tr></thead><tbody>\n");
  for (const v1::Job& job : snapshot.jobs) {
    const v1::JobProgress& progress = job.progress();
    const std::string state = StateName(job.state());
    const std::string eta = Terminal(job.state()) || !progress.has_eta_seconds()
                                ? "-"
                                : base::FormatDuration(progress.eta_seconds());
    absl::StrAppend(
        html, "<tr class=\"job\" data-job-id=\"", XmlEscape(job.job_id()), "\" data-state=\"",
        XmlEscape(state), "\">", Cell(JobLabel(job)), "<td class=\"state ", XmlEscape(state), "\">",
        XmlEscape(state),
        job.state_reason().empty() ? ""
                                   : absl::StrCat("<br><small>", XmlEscape(job.state_reason()), "</small>"),
        "</td><td><progress max=\"", std::max<int64_t>(progress.rounds(), 1), "\" value=\"",
        progress.rounds_completed(), "\"></progress> ", progress.rounds_completed(), "/", progress.rounds(),
        "</td>", Cell(Loss(progress.has_loss(), progress.loss())),
        Cell(progress.has_eval_loss()
                 ? absl::StrCat(Loss(true, progress.eval_loss()), " (round ", progress.eval_round(), ")")
                 : "-"),
        Cell(progress.has_tokens_per_second() ? base::FormatRate(progress.tokens_per_second()) : "-"),
        Cell(eta), Cell(absl::StrCat(progress.active_workers())), "</tr>\n");
  }
  if (snapshot.jobs.empty())
    absl::StrAppend(html, "<tr><td colspan=\"8\">No job has been submitted yet.</td></tr>\n");
  if (snapshot.more_jobs) {
    absl::StrAppend(html,
                    "<tr><td colspan=\"8\">Older jobs are not shown (<code>slimfit jobs</code> lists them "
                    "all).</td></tr>\n");
  }
  absl::StrAppend(html, "</tbody></table></section>\n");
}

void Detail(const StatusSnapshot& snapshot, const JobDetail& detail, std::string* html) {
  const v1::Job& job = detail.job;
  absl::StrAppend(html, "<section class=\"job-detail\" data-job-id=\"", XmlEscape(job.job_id()), "\"><h2>",
                  XmlEscape(JobLabel(job)), "</h2>\n");
  const v1::JobProgress& progress = job.progress();
  absl::StrAppend(html, "<p>", XmlEscape(StateName(job.state())), ", round ", progress.rounds_completed(),
                  " of ", progress.rounds(), ", ", XmlEscape(base::FormatCount(progress.tokens_trained())),
                  " tokens trained",
                  progress.has_checkpoint_round()
                      ? absl::StrCat(", latest checkpoint after round ", progress.checkpoint_round())
                      : "",
                  ".</p>\n");
  absl::StatusOr<std::string> curves =
      LossCurvesSvg(detail.events, absl::StrCat(job.job_id(), ": loss by round"));
  if (curves.ok()) {
    absl::StrAppend(html, "<div class=\"chart loss-curves\">", *curves, "</div>\n");
  } else {
    absl::StrAppend(
        html, "<p class=\"note\">Loss curves: ", XmlEscape(std::string(curves.status().message())), "</p>\n");
  }

  std::vector<std::pair<std::string, v1::WorkerJobPlan>> plans;
  for (const v1::WorkerInfo& worker : snapshot.workers) {
    for (const v1::WorkerJobPlan& plan : worker.plans()) {
      if (plan.job_id() == job.job_id()) plans.emplace_back(worker.worker_id(), plan);
    }
  }
  if (!plans.empty()) {
    absl::StrAppend(
        html,
        "<h3>Plans</h3><table class=\"plans\"><thead><tr><th>worker</th><th>plan</th>"
        "<th>peak measured / predicted</th><th>speed measured / predicted</th></tr></thead><tbody>\n");
    for (const auto& [worker_id, plan] : plans) {
      absl::StrAppend(html, "<tr class=\"plan\" data-worker-id=\"", XmlEscape(worker_id), "\">",
                      Cell(worker_id), Cell(planner::PlanSummaryOf(plan.plan().plan())),
                      Cell(PeakVersus(plan)), Cell(SpeedVersus(plan)), "</tr>\n");
    }
    absl::StrAppend(html, "</tbody></table>\n");
  }
  for (const WorkerPlanChart& chart : detail.plan_charts) {
    absl::StrAppend(html, "<div class=\"chart plan-search\" data-worker-id=\"", XmlEscape(chart.worker_id),
                    "\">");
    if (chart.svg.empty()) {
      absl::StrAppend(html, "<p class=\"note\">Plan search for ", XmlEscape(chart.worker_id), ": ",
                      XmlEscape(chart.error), "</p>");
    } else {
      absl::StrAppend(html, chart.svg);
    }
    absl::StrAppend(html, "</div>\n");
  }
  absl::StrAppend(html, "</section>\n");
}

}  // namespace

std::string RenderStatusFragment(const StatusSnapshot& snapshot) {
  std::string html;
  Summary(snapshot, &html);
  Workers(snapshot, &html);
  Jobs(snapshot, &html);
  for (const JobDetail& detail : snapshot.details) Detail(snapshot, detail, &html);
  return html;
}

}  // namespace slimfit::status_views
