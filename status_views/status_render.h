// The coordinator status page's content as an HTML fragment (no scripts, no external references),
// from a snapshot of the workers and jobs. server/status_page.h serves it to the page's own script,
// which puts it in the page every few seconds.
//
// What it shows:
//   - a summary: live workers by state, running and queued jobs;
//   - workers: state, device, budget, measured peak, threads, current work, shards completed and
//     failed, last heartbeat, and per job its plan with predicted against measured peak bytes and
//     tokens per second;
//   - jobs (newest first): state and why, progress, training and held-out loss, tokens per second,
//     ETA, workers;
//   - each job in `details`: its training and held-out loss curves (status_views/loss_curves.h), its
//     workers' plans, and each worker's plan search (planner/plan_chart.h) as inline SVG.
// Elements carry stable ids, classes and data- attributes (`tr.worker[data-worker-id]`,
// `tr.job[data-job-id][data-state]`, `section.job-detail[data-job-id]`) for tests and user styles.
// Every text from the snapshot is HTML-escaped.
//
// Thread safety: pure functions.
#ifndef SLIMFIT_STATUS_VIEWS_STATUS_RENDER_H_
#define SLIMFIT_STATUS_VIEWS_STATUS_RENDER_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/slimfit.pb.h"

namespace slimfit::status_views {

// One worker's plan search for a job, drawn (or why not).
struct WorkerPlanChart {
  std::string worker_id;
  std::string svg;    // empty when `error` says why there is none
  std::string error;  // e.g. the planner's refusal
};

struct JobDetail {
  v1::Job job;
  std::vector<v1::JobEvent> events;  // the job's retained events (for its curves)
  std::vector<WorkerPlanChart> plan_charts;
};

struct StatusSnapshot {
  absl::Time now;
  std::vector<v1::WorkerInfo> workers;  // every worker the coordinator knows, by id
  std::vector<v1::Job> jobs;            // newest first
  bool more_jobs = false;               // older jobs exist that are not listed
  std::vector<JobDetail> details;       // jobs shown in full
};

std::string RenderStatusFragment(const StatusSnapshot& snapshot);

}  // namespace slimfit::status_views

#endif  // SLIMFIT_STATUS_VIEWS_STATUS_RENDER_H_
