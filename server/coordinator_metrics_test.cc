#include "server/coordinator_metrics.h"

#include <string>
#include <vector>

#include "base/metrics.h"
#include "gtest/gtest.h"

namespace slimfit::server {
namespace {

// The value on the line that starts with `series` ("name{labels}"), or -1 when there is none.
double Value(const std::string& text, const std::string& series) {
  const std::string prefix = series + " ";
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size()));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return -1;
}

v1::JobEvent Round(double seconds, double waiting, int64_t to_workers) {
  v1::JobEvent event;
  v1::RoundCompleted* round = event.mutable_round_completed();
  round->set_round_seconds(seconds);
  round->set_tokens(1000);
  round->set_shards(3);
  round->mutable_timing()->set_waiting_seconds(waiting);
  round->mutable_timing()->set_shards_seconds(seconds - waiting);
  round->mutable_timing()->set_worker_compute_seconds(2 * seconds);
  round->mutable_timing()->set_bytes_to_workers(to_workers);
  round->mutable_timing()->set_bytes_from_workers(2 * to_workers);
  return event;
}

TEST(CoordinatorMetrics, CountsWhatJobEventsSay) {
  base::MetricRegistry registry;
  CoordinatorMetrics metrics(&registry);
  ASSERT_TRUE(registry.registration_status().ok()) << registry.registration_status();
  metrics.ObserveEvent(Round(0.5, 0.1, 4096));
  v1::JobEvent started_over = Round(1.5, 0.2, 4096);
  started_over.mutable_round_completed()->set_recomputations(2);
  started_over.mutable_round_completed()->mutable_timing()->set_checkpoint_seconds(0.25);  // waited for one
  metrics.ObserveEvent(started_over);
  v1::JobEvent reassigned;
  reassigned.mutable_shard_reassigned()->set_shard_id(2);
  metrics.ObserveEvent(reassigned);
  v1::JobEvent verified;
  verified.mutable_shard_verified()->set_agreed(true);
  metrics.ObserveEvent(verified);
  verified.mutable_shard_verified()->set_agreed(false);
  metrics.ObserveEvent(verified);
  v1::JobEvent checkpoint;
  checkpoint.mutable_checkpoint_written()->set_bytes(12345);
  checkpoint.mutable_checkpoint_written()->set_seconds(9);  // written while the round ran: not a phase
  metrics.ObserveEvent(checkpoint);
  v1::JobEvent finished;
  finished.mutable_state_changed()->set_state(v1::JOB_STATE_SUCCEEDED);
  metrics.ObserveEvent(finished);
  v1::JobEvent running;
  running.mutable_state_changed()->set_state(v1::JOB_STATE_RUNNING);
  metrics.ObserveEvent(running);  // not terminal: not counted

  const std::string text = registry.Exposition();
  EXPECT_EQ(Value(text, "slimfit_rounds_total"), 2) << text;
  EXPECT_EQ(Value(text, "slimfit_round_seconds_count"), 2);
  EXPECT_EQ(Value(text, "slimfit_round_seconds_sum"), 2);
  EXPECT_EQ(Value(text, "slimfit_round_seconds_bucket{le=\"0.8\"}"), 1);  // 0.5 ≤ 0.8 < 1.5
  EXPECT_NEAR(Value(text, "slimfit_round_phase_seconds_total{phase=\"waiting\"}"), 0.3, 1e-12);
  EXPECT_NEAR(Value(text, "slimfit_round_phase_seconds_total{phase=\"shards\"}"), 1.7, 1e-12);
  EXPECT_EQ(Value(text, "slimfit_round_phase_seconds_total{phase=\"step\"}"),
            0);  // the events above have none
  EXPECT_NEAR(Value(text, "slimfit_round_phase_seconds_total{phase=\"checkpoint\"}"), 0.25, 1e-12);
  EXPECT_EQ(Value(text, "slimfit_round_worker_seconds_total{phase=\"compute\"}"), 4);
  EXPECT_EQ(Value(text, "slimfit_round_bytes_total{direction=\"to_workers\"}"), 8192);
  EXPECT_EQ(Value(text, "slimfit_round_bytes_total{direction=\"from_workers\"}"), 16384);
  EXPECT_EQ(Value(text, "slimfit_tokens_trained_total"), 2000);
  EXPECT_EQ(Value(text, "slimfit_shards_total"), 6);
  EXPECT_EQ(Value(text, "slimfit_shard_reassignments_total"), 1);
  EXPECT_EQ(Value(text, "slimfit_round_recomputations_total"), 2);
  EXPECT_EQ(Value(text, "slimfit_shard_verifications_total{agreed=\"true\"}"), 1);
  EXPECT_EQ(Value(text, "slimfit_shard_verifications_total{agreed=\"false\"}"), 1);
  EXPECT_EQ(Value(text, "slimfit_checkpoint_bytes_total"), 12345);
  EXPECT_EQ(Value(text, "slimfit_jobs_finished_total{state=\"SUCCEEDED\"}"), 1);
  EXPECT_EQ(text.find("slimfit_jobs_finished_total{state=\"RUNNING\"}"), std::string::npos);
}

TEST(CoordinatorMetrics, WorkersAndJobsAsGauges) {
  std::vector<v1::WorkerInfo> workers(3);
  workers[0].set_worker_id("w-a");
  workers[0].set_state(v1::WORKER_STATE_BUSY);
  workers[0].set_memory_budget_bytes(8 << 20);
  workers[0].set_measured_peak_bytes(6 << 20);
  workers[0].set_shards_completed(10);
  workers[0].set_shards_failed(1);
  v1::WorkerJobPlan* plan = workers[0].add_plans();
  plan->set_job_id("job-000001");
  plan->mutable_plan()->mutable_prediction()->set_peak_bytes(7 << 20);
  plan->set_predicted_tokens_per_second(15000);
  plan->set_measured_tokens_per_second(12000);
  workers[1].set_worker_id("w-b");
  workers[1].set_state(v1::WORKER_STATE_LOST);
  workers[2].set_worker_id("w-c");
  workers[2].set_state(v1::WORKER_STATE_LEFT);  // counted by state, no series of its own
  std::vector<v1::Job> jobs(1);
  jobs[0].set_job_id("job-000001");
  jobs[0].set_state(v1::JOB_STATE_RUNNING);
  jobs[0].mutable_progress()->set_rounds(20);
  jobs[0].mutable_progress()->set_rounds_completed(4);
  jobs[0].mutable_progress()->set_loss(2.5);
  jobs[0].mutable_progress()->set_eta_seconds(30);

  base::MetricRegistry registry;
  registry.AddCollector(CoordinatorMetrics::WorkerAndJobFamilies(),
                        [&](std::vector<base::MetricFamily>* families) {
                          CoordinatorMetrics::FillWorkerAndJobFamilies(workers, jobs, families);
                        });
  ASSERT_TRUE(registry.registration_status().ok()) << registry.registration_status();
  const std::string text = registry.Exposition();
  EXPECT_EQ(Value(text, "slimfit_workers{state=\"BUSY\"}"), 1) << text;
  EXPECT_EQ(Value(text, "slimfit_workers{state=\"LOST\"}"), 1);
  EXPECT_EQ(Value(text, "slimfit_workers{state=\"LEFT\"}"), 1);
  EXPECT_EQ(Value(text, "slimfit_workers{state=\"IDLE\"}"), 0);  // every state, zero included
  EXPECT_EQ(Value(text, "slimfit_worker_state{worker_id=\"w-a\",state=\"BUSY\"}"), 1);
  EXPECT_EQ(text.find("worker_id=\"w-c\""), std::string::npos);
  EXPECT_EQ(Value(text, "slimfit_worker_memory_budget_bytes{worker_id=\"w-a\"}"), 8 << 20);
  EXPECT_EQ(Value(text, "slimfit_worker_measured_peak_bytes{worker_id=\"w-a\"}"), 6 << 20);
  EXPECT_EQ(Value(text, "slimfit_worker_shards_total{worker_id=\"w-a\",outcome=\"completed\"}"), 10);
  EXPECT_EQ(Value(text, "slimfit_worker_shards_total{worker_id=\"w-a\",outcome=\"failed\"}"), 1);
  EXPECT_EQ(Value(text, "slimfit_worker_plan_predicted_peak_bytes{worker_id=\"w-a\",job_id=\"job-000001\"}"),
            7 << 20);
  EXPECT_EQ(
      Value(text, "slimfit_worker_plan_predicted_tokens_per_second{worker_id=\"w-a\",job_id=\"job-000001\"}"),
      15000);
  EXPECT_EQ(
      Value(text, "slimfit_worker_plan_measured_tokens_per_second{worker_id=\"w-a\",job_id=\"job-000001\"}"),
      12000);
  // Not measured yet: no sample rather than a misleading 0.
  EXPECT_EQ(text.find("slimfit_worker_plan_measured_peak_bytes{"), std::string::npos);
  EXPECT_EQ(Value(text, "slimfit_jobs{state=\"RUNNING\"}"), 1);
  EXPECT_EQ(Value(text, "slimfit_jobs{state=\"QUEUED\"}"), 0);
  EXPECT_EQ(Value(text, "slimfit_job_rounds{job_id=\"job-000001\"}"), 20);
  EXPECT_EQ(Value(text, "slimfit_job_rounds_completed{job_id=\"job-000001\"}"), 4);
  EXPECT_EQ(Value(text, "slimfit_job_loss{job_id=\"job-000001\"}"), 2.5);
  EXPECT_EQ(Value(text, "slimfit_job_eta_seconds{job_id=\"job-000001\"}"), 30);
  EXPECT_EQ(text.find("slimfit_job_eval_loss{"), std::string::npos);
}

}  // namespace
}  // namespace slimfit::server
