#include "server/coordinator_metrics.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "server/job_record.h"

namespace slimfit::server {
namespace {

using base::MetricFamily;
using base::MetricSample;
using base::MetricType;

// The order of WorkerAndJobFamilies().
enum Family {
  kWorkers,
  kWorkerState,
  kWorkerBudget,
  kWorkerMeasuredPeak,
  kWorkerShards,
  kPlanPredictedPeak,
  kPlanMeasuredPeak,
  kPlanPredictedSpeed,
  kPlanMeasuredSpeed,
  kJobs,
  kJobRounds,
  kJobRoundsCompleted,
  kJobTokensTrained,
  kJobLoss,
  kJobEvalLoss,
  kJobTokensPerSecond,
  kJobEta,
  kJobActiveWorkers,
  kFamilyCount,
};

void Add(std::vector<MetricFamily>* families, Family family, std::vector<std::string> labels, double value) {
  MetricSample sample;
  sample.label_values = std::move(labels);
  sample.value = value;
  (*families)[family].samples.push_back(std::move(sample));
}

// "IDLE" for WORKER_STATE_IDLE, "RUNNING" for JOB_STATE_RUNNING.
std::string Short(const std::string& name, absl::string_view prefix) {
  return absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name;
}
std::string Label(v1::WorkerState state) { return Short(v1::WorkerState_Name(state), "WORKER_STATE_"); }
std::string Label(v1::JobState state) { return Short(v1::JobState_Name(state), "JOB_STATE_"); }

// Workers that left or were revoked keep no per-worker series (they never come back as such).
bool Gone(v1::WorkerState state) {
  return state == v1::WORKER_STATE_LEFT || state == v1::WORKER_STATE_REVOKED;
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(base::MetricRegistry* registry)
    : registry_(registry),
      rounds_(
          registry->AddCounter("slimfit_rounds_total", "Rounds completed (optimizer steps), all jobs.", {})),
      round_seconds_(registry->AddHistogram(
          "slimfit_round_seconds", "Wall time of a round from its first shard sent to its optimizer step.",
          {}, base::ExponentialBuckets(0.05, 2, 14))),
      round_phase_seconds_(registry->AddCounter("slimfit_round_phase_seconds_total",
                                                "Where rounds' wall time went on the coordinator "
                                                "(RoundTiming): waiting (no shard in flight), shards "
                                                "(at least one in flight: fetch, compute, transfer), "
                                                "aggregation, step (optimizer step and publishing), "
                                                "checkpoint.",
                                                {"phase"})),
      round_worker_seconds_(registry->AddCounter(
          "slimfit_round_worker_seconds_total",
          "Seconds the workers of counted shards report (RoundTiming; overlapping in wall time): fetch "
          "(parameters), compute (the engine), stream (results back).",
          {"phase"})),
      round_bytes_(
          registry->AddCounter("slimfit_round_bytes_total",
                               "Bytes moved for rounds: parameters served to workers (to_workers) and "
                               "results received from them (from_workers).",
                               {"direction"})),
      tokens_(
          registry->AddCounter("slimfit_tokens_trained_total", "Predicted tokens of completed rounds.", {})),
      shards_(registry->AddCounter("slimfit_shards_total",
                                   "Shards whose results counted in completed rounds.", {})),
      reassignments_(registry->AddCounter("slimfit_shard_reassignments_total",
                                          "Shards sent to another worker after a failure or a lost worker.",
                                          {})),
      recomputations_(registry->AddCounter(
          "slimfit_round_recomputations_total",
          "Rounds started over before they completed: a worker outvoted after its results counted, or a "
          "shard summed as it arrived that failed midway.",
          {})),
      verifications_(
          registry->AddCounter("slimfit_shard_verifications_total",
                               "Spot checks: shards computed by a second worker and compared, by whether "
                               "the first two agreed.",
                               {"agreed"})),
      quarantines_(registry->AddCounter("slimfit_worker_quarantines_total",
                                        "Workers shut out of a job for results that failed validation or "
                                        "verification.",
                                        {})),
      evaluations_(registry->AddCounter("slimfit_evaluations_total", "Held-out evaluations completed.", {})),
      checkpoints_(registry->AddCounter("slimfit_checkpoints_total", "Checkpoints written.", {})),
      checkpoint_bytes_(
          registry->AddCounter("slimfit_checkpoint_bytes_total", "Bytes of checkpoints written.", {})),
      jobs_finished_(registry->AddCounter("slimfit_jobs_finished_total",
                                          "Jobs that reached a terminal state.", {"state"})) {}

void CoordinatorMetrics::ObserveEvent(const v1::JobEvent& event) {
  switch (event.event_case()) {
    case v1::JobEvent::kRoundCompleted: {
      const v1::RoundCompleted& round = event.round_completed();
      const v1::RoundTiming& timing = round.timing();
      rounds_.Get().Increment();
      round_seconds_.Get().Observe(round.round_seconds());
      round_phase_seconds_.WithLabels({"waiting"}).Increment(timing.waiting_seconds());
      round_phase_seconds_.WithLabels({"shards"}).Increment(timing.shards_seconds());
      round_phase_seconds_.WithLabels({"aggregation"}).Increment(timing.aggregation_seconds());
      round_phase_seconds_.WithLabels({"step"}).Increment(timing.step_seconds());
      round_phase_seconds_.WithLabels({"checkpoint"}).Increment(timing.checkpoint_seconds());
      round_worker_seconds_.WithLabels({"fetch"}).Increment(timing.worker_fetch_seconds());
      round_worker_seconds_.WithLabels({"compute"}).Increment(timing.worker_compute_seconds());
      round_worker_seconds_.WithLabels({"stream"}).Increment(timing.worker_stream_seconds());
      round_bytes_.WithLabels({"to_workers"}).Increment(static_cast<double>(timing.bytes_to_workers()));
      round_bytes_.WithLabels({"from_workers"}).Increment(static_cast<double>(timing.bytes_from_workers()));
      tokens_.Get().Increment(static_cast<double>(round.tokens()));
      shards_.Get().Increment(round.shards());
      recomputations_.Get().Increment(round.recomputations());
      break;
    }
    case v1::JobEvent::kShardReassigned:
      reassignments_.Get().Increment();
      break;
    case v1::JobEvent::kShardVerified:
      verifications_.WithLabels({event.shard_verified().agreed() ? "true" : "false"}).Increment();
      break;
    case v1::JobEvent::kWorkerQuarantined:
      quarantines_.Get().Increment();
      break;
    case v1::JobEvent::kEvaluation:
      evaluations_.Get().Increment();
      break;
    case v1::JobEvent::kCheckpointWritten:
      checkpoints_.Get().Increment();
      checkpoint_bytes_.Get().Increment(static_cast<double>(event.checkpoint_written().bytes()));
      break;
    case v1::JobEvent::kStateChanged:
      if (IsTerminal(event.state_changed().state())) {
        jobs_finished_.WithLabels({Label(event.state_changed().state())}).Increment();
      }
      break;
    default:
      break;
  }
}

std::vector<MetricFamily> CoordinatorMetrics::WorkerAndJobFamilies() {
  std::vector<MetricFamily> families(kFamilyCount);
  auto describe = [&](Family family, const char* name, const char* help, MetricType type,
                      std::vector<std::string> labels) {
    families[family] = MetricFamily{name, help, type, std::move(labels), {}};
  };
  describe(kWorkers, "slimfit_workers", "Workers known to the coordinator, by state.", MetricType::kGauge,
           {"state"});
  describe(kWorkerState, "slimfit_worker_state",
           "1 for each worker (not left or revoked) in its current state.", MetricType::kGauge,
           {"worker_id", "state"});
  describe(kWorkerBudget, "slimfit_worker_memory_budget_bytes", "A worker's memory budget (--memory_budget).",
           MetricType::kGauge, {"worker_id"});
  describe(kWorkerMeasuredPeak, "slimfit_worker_measured_peak_bytes",
           "Highest peak tensor bytes a worker measured in any gradient call, as last reported.",
           MetricType::kGauge, {"worker_id"});
  describe(kWorkerShards, "slimfit_worker_shards_total",
           "Shard attempts a worker finished, by outcome (completed, failed); their sum is its attempts.",
           MetricType::kCounter, {"worker_id", "outcome"});
  describe(kPlanPredictedPeak, "slimfit_worker_plan_predicted_peak_bytes",
           "Predicted peak bytes of the plan a worker runs for a job.", MetricType::kGauge,
           {"worker_id", "job_id"});
  describe(kPlanMeasuredPeak, "slimfit_worker_plan_measured_peak_bytes",
           "Measured peak bytes of a worker's last completed shard of a job.", MetricType::kGauge,
           {"worker_id", "job_id"});
  describe(kPlanPredictedSpeed, "slimfit_worker_plan_predicted_tokens_per_second",
           "Tokens per second the planner predicts for a worker's plan for a job.", MetricType::kGauge,
           {"worker_id", "job_id"});
  describe(kPlanMeasuredSpeed, "slimfit_worker_plan_measured_tokens_per_second",
           "Tokens per second a worker measured over its last completed shard of a job.", MetricType::kGauge,
           {"worker_id", "job_id"});
  describe(kJobs, "slimfit_jobs", "Jobs this coordinator is running, by state (QUEUED, RUNNING).",
           MetricType::kGauge, {"state"});
  describe(kJobRounds, "slimfit_job_rounds", "Rounds an active job is to run.", MetricType::kGauge,
           {"job_id"});
  describe(kJobRoundsCompleted, "slimfit_job_rounds_completed", "Rounds an active job has completed.",
           MetricType::kGauge, {"job_id"});
  describe(kJobTokensTrained, "slimfit_job_tokens_trained", "Predicted tokens an active job has trained on.",
           MetricType::kGauge, {"job_id"});
  describe(kJobLoss, "slimfit_job_loss", "Training loss of an active job's last round (nats per token).",
           MetricType::kGauge, {"job_id"});
  describe(kJobEvalLoss, "slimfit_job_eval_loss",
           "Held-out loss of an active job's latest evaluation (nats per token).", MetricType::kGauge,
           {"job_id"});
  describe(kJobTokensPerSecond, "slimfit_job_tokens_per_second",
           "Tokens per second of an active job's last round.", MetricType::kGauge, {"job_id"});
  describe(kJobEta, "slimfit_job_eta_seconds", "Estimated seconds until an active job finishes.",
           MetricType::kGauge, {"job_id"});
  describe(kJobActiveWorkers, "slimfit_job_active_workers",
           "Workers computing shards of an active job's round.", MetricType::kGauge, {"job_id"});
  return families;
}

void CoordinatorMetrics::FillWorkerAndJobFamilies(const std::vector<v1::WorkerInfo>& workers,
                                                  const std::vector<v1::Job>& jobs,
                                                  std::vector<MetricFamily>* families) {
  std::map<v1::WorkerState, int> by_state;
  for (int state = v1::WORKER_STATE_IDLE; state <= v1::WORKER_STATE_REVOKED; ++state) {
    by_state[static_cast<v1::WorkerState>(state)] = 0;
  }
  for (const v1::WorkerInfo& worker : workers) {
    ++by_state[worker.state()];
    if (Gone(worker.state())) continue;
    const std::string& id = worker.worker_id();
    Add(families, kWorkerState, {id, Label(worker.state())}, 1);
    Add(families, kWorkerBudget, {id}, static_cast<double>(worker.memory_budget_bytes()));
    Add(families, kWorkerMeasuredPeak, {id}, static_cast<double>(worker.measured_peak_bytes()));
    Add(families, kWorkerShards, {id, "completed"}, static_cast<double>(worker.shards_completed()));
    Add(families, kWorkerShards, {id, "failed"}, static_cast<double>(worker.shards_failed()));
    for (const v1::WorkerJobPlan& plan : worker.plans()) {
      const std::vector<std::string> labels = {id, plan.job_id()};
      Add(families, kPlanPredictedPeak, labels, static_cast<double>(plan.plan().prediction().peak_bytes()));
      Add(families, kPlanPredictedSpeed, labels, plan.predicted_tokens_per_second());
      if (plan.has_measured_peak_bytes()) {
        Add(families, kPlanMeasuredPeak, labels, static_cast<double>(plan.measured_peak_bytes()));
      }
      if (plan.has_measured_tokens_per_second()) {
        Add(families, kPlanMeasuredSpeed, labels, plan.measured_tokens_per_second());
      }
    }
  }
  for (const auto& [state, count] : by_state) Add(families, kWorkers, {Label(state)}, count);

  std::map<std::string, int> jobs_by_state = {{"QUEUED", 0}, {"RUNNING", 0}};
  for (const v1::Job& job : jobs) {
    ++jobs_by_state[Label(job.state())];
    const std::vector<std::string> id = {job.job_id()};
    const v1::JobProgress& progress = job.progress();
    Add(families, kJobRounds, id, static_cast<double>(progress.rounds()));
    Add(families, kJobRoundsCompleted, id, static_cast<double>(progress.rounds_completed()));
    Add(families, kJobTokensTrained, id, static_cast<double>(progress.tokens_trained()));
    Add(families, kJobActiveWorkers, id, progress.active_workers());
    if (progress.has_loss()) Add(families, kJobLoss, id, progress.loss());
    if (progress.has_eval_loss()) Add(families, kJobEvalLoss, id, progress.eval_loss());
    if (progress.has_tokens_per_second())
      Add(families, kJobTokensPerSecond, id, progress.tokens_per_second());
    if (progress.has_eta_seconds()) Add(families, kJobEta, id, progress.eta_seconds());
  }
  for (const auto& [state, count] : jobs_by_state) Add(families, kJobs, {state}, count);
}

void CoordinatorMetrics::CollectFrom(Coordinator* coordinator) {
  registry_->AddCollector(WorkerAndJobFamilies(), [coordinator](std::vector<MetricFamily>* families) {
    FillWorkerAndJobFamilies(coordinator->registry().List(/*include_gone=*/true), coordinator->ActiveJobs(),
                             families);
  });
}

}  // namespace slimfit::server
