#include "server/worker_planner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "performer/trainer.h"
#include "planner/device_profile_io.h"
#include "planner/plan_proto.h"
#include "planner/plan_request_builder.h"
#include "wire/engine_settings.h"

namespace slimfit::server {

std::string WorkerKey(const WorkerHandle& worker) {
  return absl::StrCat(worker.worker_id, "@", worker.incarnation);
}

int64_t ReservedBytesPerWorker(const v1::JobSpec& spec, const performer::ModelConfig& config) {
  if (!spec.has_local_steps()) return 0;
  const performer::DType dtype =
      spec.dtype() == v1::DTYPE_FLOAT64 ? performer::DType::kFloat64 : performer::DType::kFloat32;
  return performer::LocalStepsExtraBytes(
      wire::OptimizerSettingsOf(spec.optimizer()), config.parameter_count() * performer::DTypeBytes(dtype),
      wire::TensorEncodingFromProto(spec.compression().pseudo_gradients()));
}

int64_t PlanSearchBudget(int64_t budget_bytes, int64_t reserved_bytes, double safety_margin) {
  if (reserved_bytes <= 0) return budget_bytes;
  const double usable_share = 1.0 - safety_margin;
  const int64_t reserved =
      static_cast<int64_t>(std::ceil(static_cast<double>(reserved_bytes) / usable_share)) + 1;
  return std::max<int64_t>(1, budget_bytes - reserved);
}

std::optional<planner::PlanCandidate> WorkerPlanner::PlanFor(const WorkerHandle& worker, int64_t round,
                                                             std::string* refusal) {
  const std::string key = WorkerKey(worker);
  if (auto cached = plans_.find(key); cached != plans_.end()) return cached->second;
  const JobData& data = *deps_.data;
  // The job's side of the search, as GetMemoryPlan builds it (planner::JobPlanSearchRequest), from
  // the job's data.
  planner::PlanRequestInputs job_inputs;
  job_inputs.model = deps_.config;
  job_inputs.sequence_length = data.sequence_length();
  job_inputs.documents = data.max_documents_per_sequence();
  job_inputs.sequences_per_shard =
      planner::JobSequencesPerShard(data.sequences_per_round(), deps_.options.max_sequences_per_shard);
  auto scale = budget_scale_.find(worker.worker_id);
  job_inputs.memory_budget_bytes =
      PlanSearchBudget(static_cast<int64_t>(static_cast<double>(worker.memory_budget_bytes) *
                                            (scale == budget_scale_.end() ? 1.0 : scale->second)),
                       deps_.reserved_bytes, deps_.options.safety_margin);
  job_inputs.dtype = deps_.dtype;
  job_inputs.bf16_products = deps_.bf16_products;
  job_inputs.safety_margin = deps_.options.safety_margin;
  absl::StatusOr<planner::PlanSearchRequest> built = planner::BuildPlanSearchRequest(job_inputs);
  if (!built.ok()) {
    refused_.insert(key);
    *refusal = absl::StrCat("worker ", worker.worker_id, ": ", built.status().message());
    base::LogWarning(deps_.record->job_id(), ": ", *refusal);
    return std::nullopt;
  }
  const planner::PlanSearchRequest& request = *built;
  const std::string inputs = absl::StrCat(request.memory_budget_bytes, "|",
                                          planner::DeviceProfileToProto(worker.profile).SerializeAsString());
  auto searched = searches_.find(inputs);
  if (searched == searches_.end()) {
    absl::StatusOr<planner::PlanSearchResult> found = planner::SearchPlans(request, worker.profile);
    SearchOutcome outcome;
    if (found.ok()) {
      outcome.chosen = found->chosen;
      outcome.reason = found->reason;
    } else {
      outcome.status = found.status();
    }
    searched = searches_.emplace(inputs, std::move(outcome)).first;
  }
  const SearchOutcome& result = searched->second;
  if (!result.status.ok()) {
    refused_.insert(key);
    *refusal = absl::StrCat("worker ", worker.worker_id, ": ", result.status.message());
    if (deps_.reserved_bytes > 0) {
      absl::StrAppend(refusal, ", after ", planner::HumanBytes(static_cast<double>(deps_.reserved_bytes)),
                      " of its ", planner::HumanBytes(static_cast<double>(worker.memory_budget_bytes)),
                      " budget set aside for the local steps' parameters and optimizer state");
    }
    base::LogWarning(deps_.record->job_id(), ": ", *refusal);
    return std::nullopt;
  }
  plans_.emplace(key, result.chosen);
  v1::JobEvent event;
  v1::WorkerPlanChanged* changed = event.mutable_worker_plan_changed();
  changed->set_worker_id(worker.worker_id);
  changed->set_round(round);
  *changed->mutable_plan() = planner::CandidateToProto(result.chosen);
  changed->set_reason(result.reason);
  if (auto replan = replans_.find(worker.worker_id); replan != replans_.end()) {
    *changed->mutable_previous() = planner::PlanToProto(replan->second.first);
    changed->set_reason(absl::StrCat(replan->second.second, "; ", result.reason));
    replans_.erase(replan);
  }
  changed->set_predicted_tokens_per_second(static_cast<double>(data.sequence_length()) /
                                           std::max(1e-9, result.chosen.prediction.seconds));
  deps_.record->Emit(std::move(event));
  base::LogInfo(deps_.record->job_id(), ": worker ", worker.worker_id, " plan ",
                planner::PlanSummary(result.chosen.plan), " (predicted peak ",
                planner::HumanBytes(result.chosen.prediction.peak_bytes), ")");
  return result.chosen;
}

absl::StatusOr<std::vector<WorkerPlan>> WorkerPlanner::PlanWorkers(int64_t round,
                                                                   const std::set<int>& sources) {
  const v1::JobSpec spec = deps_.record->Snapshot().spec();
  const int min_workers = spec.has_min_workers() ? spec.min_workers() : 1;
  const int64_t sequence_length = deps_.data->sequence_length();
  while (true) {
    if (deps_.stopping->load()) return absl::CancelledError("stopped");
    std::vector<WorkerHandle> live = deps_.registry->LiveWorkers(spec.constraints());
    std::vector<WorkerPlan> plans;
    std::string refusal;
    for (const WorkerHandle& worker : live) {
      if (refused_.count(WorkerKey(worker)) > 0 || quarantined_.count(worker.worker_id) > 0) continue;
      std::optional<planner::PlanCandidate> candidate = PlanFor(worker, round, &refusal);
      if (!candidate.has_value()) continue;
      WorkerPlan plan;
      plan.worker = worker;
      plan.candidate = *std::move(candidate);
      plan.tokens_per_second =
          static_cast<double>(sequence_length) / std::max(1e-9, plan.candidate.prediction.seconds);
      v1::WorkerJobPlan job_plan;
      job_plan.set_job_id(deps_.record->job_id());
      *job_plan.mutable_plan() = planner::CandidateToProto(plan.candidate);
      job_plan.set_predicted_tokens_per_second(plan.tokens_per_second);
      deps_.registry->SetJobPlan(worker.worker_id, job_plan);
      plans.push_back(std::move(plan));
    }
    // A local dataset the round needs, that none of the planned workers holds.
    const LocalSource* missing = nullptr;
    for (const int source : sources) {
      const LocalSource& local = deps_.data->local_sources()[static_cast<size_t>(source - 1)];
      bool held = false;
      for (const WorkerPlan& plan : plans) held |= plan.worker.local_datasets.count(local.sha256) > 0;
      if (!held) {
        missing = &local;
        break;
      }
    }
    const bool queued = deps_.record->state() == v1::JOB_STATE_QUEUED;
    if (!plans.empty() && static_cast<int>(plans.size()) >= min_workers && missing == nullptr) {
      if (queued)
        deps_.record->SetState(v1::JOB_STATE_RUNNING, absl::StrCat("running on ", plans.size(), " workers"));
      return plans;
    }
    if (!refusal.empty()) last_refusal_ = refusal;
    // Live workers that refused the plan do not end a job: the fleet changes (a worker that fits may
    // be restarting, or reconnecting to a coordinator that just restarted), so the job waits and its
    // reason says what the workers at hand lack.
    bool all_refused = !live.empty();
    for (const WorkerHandle& worker : live) {
      all_refused &= refused_.count(WorkerKey(worker)) > 0 || quarantined_.count(worker.worker_id) > 0;
    }
    const std::string quarantined =
        quarantined_.empty() ? "" : absl::StrCat(", ", quarantined_.size(), " quarantined");
    std::string reason =
        absl::StrCat("waiting for ", min_workers, " eligible worker", min_workers == 1 ? "" : "s", " (",
                     plans.size(), " live", quarantined, ")");
    if (plans.empty() && all_refused && !last_refusal_.empty()) {
      absl::StrAppend(&reason, "; no live worker can run the job: ", last_refusal_);
    }
    if (missing != nullptr && static_cast<int>(plans.size()) >= min_workers) {
      reason = absl::StrCat("waiting for a live eligible worker holding local dataset ", missing->name,
                            " (SHA-256 ", missing->sha256.substr(0, 12), "…)");
    }
    deps_.record->SetReason(reason);
    if (deps_.while_waiting) deps_.while_waiting();
    deps_.signal->WaitAfter(deps_.signal->count(), absl::Milliseconds(250));
  }
}

void WorkerPlanner::MaybeReplan(const WorkerPlan& plan, int64_t measured_peak, int64_t round) {
  // Workers measure everything they hold for the shard, a local-steps job's reserved bytes included.
  const int64_t predicted = plan.candidate.prediction.peak_bytes + deps_.reserved_bytes;
  if (measured_peak <= 0 || predicted <= 0) return;
  const double ratio = static_cast<double>(measured_peak) / static_cast<double>(predicted);
  if (ratio <= deps_.options.replan_ratio) return;
  if (budget_scale_.count(plan.worker.worker_id) > 0) return;
  budget_scale_[plan.worker.worker_id] = std::max(0.1, 1.0 / ratio);
  plans_.erase(WorkerKey(plan.worker));
  replans_[plan.worker.worker_id] = {
      plan.candidate.plan, absl::StrCat("measured ", planner::HumanBytes(measured_peak), " vs predicted ",
                                        planner::HumanBytes(predicted), ": replanned")};
  base::LogWarning(deps_.record->job_id(), ": worker ", plan.worker.worker_id, " measured ",
                   planner::HumanBytes(measured_peak), " vs predicted ", planner::HumanBytes(predicted),
                   ": replanning from round ", round);
}

}  // namespace slimfit::server
