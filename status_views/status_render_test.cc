#include "status_views/status_render.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace slimfit::status_views {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

StatusSnapshot Example() {
  StatusSnapshot snapshot;
  snapshot.now = absl::FromUnixSeconds(1714566896);
  v1::WorkerInfo worker;
  worker.set_worker_id("w-8a61fd3d");
  worker.set_state(v1::WORKER_STATE_BUSY);
  worker.set_device("cpu");
  worker.set_device_name("Xeon <test>");
  worker.set_memory_budget_bytes(8 << 20);
  worker.set_measured_peak_bytes(6 << 20);
  worker.set_threads(2);
  worker.set_shards_completed(12);
  worker.set_shards_failed(1);
  worker.mutable_last_heartbeat_at()->set_seconds(1714566896 - 3);
  worker.mutable_current_work()->set_job_id("job-000001");
  worker.mutable_current_work()->set_round(4);
  worker.mutable_current_work()->set_shard_id(2);
  v1::WorkerJobPlan* plan = worker.add_plans();
  plan->set_job_id("job-000001");
  plan->mutable_plan()->mutable_plan()->set_slice(0);  // full back-propagation
  plan->mutable_plan()->mutable_plan()->set_dtype(v1::DTYPE_FLOAT32);
  plan->mutable_plan()->mutable_prediction()->set_peak_bytes(4 << 20);
  plan->set_predicted_tokens_per_second(20000);
  plan->set_measured_peak_bytes(5 << 20);
  plan->set_measured_tokens_per_second(10000);
  snapshot.workers.push_back(worker);

  v1::Job job;
  job.set_job_id("job-000001");
  job.mutable_spec()->set_name("tiny & <quick>");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_state_reason("running on 1 worker");
  job.mutable_progress()->set_rounds(20);
  job.mutable_progress()->set_rounds_completed(4);
  job.mutable_progress()->set_loss(2.34567);
  job.mutable_progress()->set_eval_loss(2.5);
  job.mutable_progress()->set_eval_round(4);
  job.mutable_progress()->set_tokens_per_second(12345);
  job.mutable_progress()->set_eta_seconds(723);
  job.mutable_progress()->set_active_workers(1);
  snapshot.jobs.push_back(job);

  JobDetail detail;
  detail.job = job;
  for (int round = 1; round <= 4; ++round) {
    v1::JobEvent event;
    event.mutable_round_completed()->set_round(round);
    event.mutable_round_completed()->set_loss(5.0 - round);
    detail.events.push_back(event);
  }
  detail.plan_charts.push_back(
      {"w-8a61fd3d", "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"plan\"></svg>", ""});
  detail.plan_charts.push_back({"w-other", "", "needs at least 37.5 MiB"});
  snapshot.details.push_back(detail);
  return snapshot;
}

TEST(RenderStatusFragment, ShowsWorkersJobsCurvesAndPlans) {
  const std::string html = RenderStatusFragment(Example());
  EXPECT_TRUE(Contains(html, "Workers: 1 BUSY. Jobs: 1 RUNNING. As of 2024-05-01 12:34:56 UTC.")) << html;
  EXPECT_TRUE(Contains(html, "<tr class=\"worker\" data-worker-id=\"w-8a61fd3d\" data-state=\"BUSY\">"))
      << html;
  EXPECT_TRUE(Contains(html, "<td>cpu (Xeon &lt;test&gt;)</td>")) << html;
  EXPECT_TRUE(Contains(html, "<td>8.0 MiB</td><td>6.0 MiB</td><td>2</td><td>job-000001 round 4 shard 2</td>"))
      << html;
  EXPECT_TRUE(Contains(html, "<td>12 / 1</td><td>3s ago</td>")) << html;
  EXPECT_TRUE(Contains(html,
                       "job-000001: full back-propagation — peak 5.0 MiB / 4.0 MiB (1.25×) measured / "
                       "predicted; 10.0k tokens/s / 20.0k tokens/s (0.50×)"))
      << html;
  EXPECT_TRUE(Contains(html, "<tr class=\"job\" data-job-id=\"job-000001\" data-state=\"RUNNING\">")) << html;
  EXPECT_TRUE(Contains(html, "job-000001 &quot;tiny &amp; &lt;quick&gt;&quot;")) << html;
  EXPECT_TRUE(Contains(html, "<progress max=\"20\" value=\"4\"></progress> 4/20")) << html;
  EXPECT_TRUE(
      Contains(html, "<td>2.3457</td><td>2.5000 (round 4)</td><td>12.3k tokens/s</td><td>12m 03s</td>"))
      << html;
  EXPECT_TRUE(Contains(html, "<section class=\"job-detail\" data-job-id=\"job-000001\">")) << html;
  EXPECT_TRUE(Contains(html, "<div class=\"chart loss-curves\"><svg")) << html;
  EXPECT_TRUE(Contains(html, "training loss")) << html;
  EXPECT_TRUE(Contains(html, "<tr class=\"plan\" data-worker-id=\"w-8a61fd3d\">")) << html;
  EXPECT_TRUE(Contains(html, "<div class=\"chart plan-search\" data-worker-id=\"w-8a61fd3d\"><svg")) << html;
  EXPECT_TRUE(Contains(html, "Plan search for w-other: needs at least 37.5 MiB")) << html;
  EXPECT_FALSE(Contains(html, "<script")) << html;
}

TEST(RenderStatusFragment, EmptyCoordinatorAndFinishedJobs) {
  StatusSnapshot empty;
  empty.now = absl::FromUnixSeconds(0);
  std::string html = RenderStatusFragment(empty);
  EXPECT_TRUE(Contains(html, "No worker has registered yet.")) << html;
  EXPECT_TRUE(Contains(html, "No job has been submitted yet.")) << html;

  StatusSnapshot finished = Example();
  finished.jobs[0].set_state(v1::JOB_STATE_SUCCEEDED);
  finished.details[0].job = finished.jobs[0];
  finished.details[0].events.clear();
  finished.more_jobs = true;
  html = RenderStatusFragment(finished);
  EXPECT_TRUE(Contains(html, "data-state=\"SUCCEEDED\"")) << html;
  EXPECT_TRUE(Contains(html, "<td>12m 03s</td>") == false) << "no ETA for a finished job";
  EXPECT_TRUE(Contains(html, "Loss curves: no round has completed")) << html;
  EXPECT_TRUE(Contains(html, "Older jobs are not shown")) << html;
}

}  // namespace
}  // namespace slimfit::status_views
