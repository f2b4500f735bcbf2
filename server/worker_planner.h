// The plans of one job's workers: for every live eligible worker, the planner's choice for this
// job (its profile and memory budget in, a Plan out), cached per worker incarnation (and each
// search by its inputs, so a fleet of identical devices is searched once); the wait for
// `min_workers` (QUEUED until then); a worker whose plan was refused, or that is quarantined from
// the job, kept out; and one replan of a
// worker whose measured peak exceeded the prediction. Every new plan is a WorkerPlanChanged event
// and goes to the registry for `slimfit workers`.
//
// Thread safety: used by its job runner's thread only (PlanWorkers, Refuse, MaybeReplan). The
// pointers it is given must outlive it.
#ifndef SLIMFIT_SERVER_WORKER_PLANNER_H_
#define SLIMFIT_SERVER_WORKER_PLANNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "planner/plan_search.h"
#include "server/event_signal.h"
#include "server/job_data.h"
#include "server/job_record.h"
#include "server/runner_options.h"
#include "server/worker_registry.h"

namespace slimfit::server {

// A worker and what it runs for this job.
struct WorkerPlan {
  WorkerHandle worker;
  planner::PlanCandidate candidate;
  double tokens_per_second = 0;  // predicted
};

// "w-1234@3": a worker incarnation.
std::string WorkerKey(const WorkerHandle& worker);

// Bytes each worker of a job holds beside its plan's peak: a local-steps job's inner optimizer
// (performer::LocalStepsExtraBytes of the job's optimizer and parameter bytes); 0 otherwise.
int64_t ReservedBytesPerWorker(const v1::JobSpec& spec, const performer::ModelConfig& config);

// The budget to search plans within for a worker of `budget_bytes` that holds `reserved_bytes`
// beside the plan: the worker checks peak + reserved ≤ floor(budget · (1 − margin)), so the
// searched budget's usable part is that much smaller (rounded towards the safe side); ≥ 1.
int64_t PlanSearchBudget(int64_t budget_bytes, int64_t reserved_bytes, double safety_margin);

class WorkerPlanner {
 public:
  struct Deps {
    JobRecord* record = nullptr;
    WorkerRegistry* registry = nullptr;
    EventSignal* signal = nullptr;
    const JobData* data = nullptr;
    performer::ModelConfig config;
    performer::DType dtype = performer::DType::kFloat32;
    bool bf16_products = false;  // JobSpec.bf16_products: in every plan
    RunnerOptions options;
    const std::atomic<bool>* stopping = nullptr;  // the runner's stop or cancel flag
    // Bytes every worker holds beside the plan's peak (a local-steps job's inner optimizer:
    // performer::LocalStepsExtraBytes); plans are searched within the budget less these.
    int64_t reserved_bytes = 0;
    // Called on the caller's thread each time PlanWorkers waits (the job runner records a
    // checkpoint that finished meanwhile); may be empty.
    std::function<void()> while_waiting;
  };

  explicit WorkerPlanner(Deps deps) : deps_(std::move(deps)) {}

  // Plans of the live eligible workers, once at least `min_workers` of them have one (until then
  // the job waits, its reason saying so; the first success moves a QUEUED job to RUNNING).
  // While every live eligible worker refuses the plan, the job waits too (a worker that fits may be
  // restarting or reconnecting) and its reason carries the planner's refusal. CANCELLED when the
  // runner stops.
  // `sources` are the local datasets (JobData sources ≥ 1) the round needs: it also waits until,
  // for each, one of the planned workers holds it.
  absl::StatusOr<std::vector<WorkerPlan>> PlanWorkers(int64_t round, const std::set<int>& sources = {});

  // The worker refused its plan (RESOURCE_EXHAUSTED from the worker): no more shards of this job
  // for this incarnation.
  void Refuse(const WorkerHandle& worker) { refused_.insert(WorkerKey(worker)); }

  // The worker returned results that failed validation or verification: no more shards of this
  // job, whatever incarnation. False when it already was quarantined.
  bool Quarantine(const std::string& worker_id) { return quarantined_.insert(worker_id).second; }
  bool IsQuarantined(const std::string& worker_id) const { return quarantined_.count(worker_id) > 0; }

  // When `measured_peak` exceeds the plan's prediction by more than options.replan_ratio, the worker
  // is planned again from `round`, once per worker and job, against its budget shrunk by the error
  // (repeating would compound one device's constant overhead into a refusal).
  void MaybeReplan(const WorkerPlan& plan, int64_t measured_peak, int64_t round);

 private:
  // The planner's choice for `worker`, searched and announced when it is new; nullopt (with
  // *refusal set) when the planner refuses it.
  std::optional<planner::PlanCandidate> PlanFor(const WorkerHandle& worker, int64_t round,
                                                std::string* refusal);

  // A search's outcome, kept by its inputs (the device profile and the effective budget; the
  // workload is the job's): a fleet of identical devices is planned once, not once per worker —
  // a search costs milliseconds to a second of the coordinator's CPU.
  struct SearchOutcome {
    absl::Status status;
    planner::PlanCandidate chosen;
    std::string reason;
  };

  const Deps deps_;
  std::map<std::string, SearchOutcome> searches_;        // by profile and budget
  std::map<std::string, planner::PlanCandidate> plans_;  // by WorkerKey
  std::map<std::string, double> budget_scale_;           // replans: budget multiplier per worker id
  std::map<std::string, std::pair<performer::Plan, std::string>> replans_;  // previous plan, why
  std::set<std::string> refused_;                                           // by WorkerKey
  std::set<std::string> quarantined_;                                       // by worker id
  std::string last_refusal_;  // the latest planner refusal, for the reason a waiting job shows
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_WORKER_PLANNER_H_
