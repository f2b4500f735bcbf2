// Runs one round's (or one evaluation's) shards on a job's workers: cut the sequences in proportion
// to the workers' predicted speed (shard_split.h), call every worker's ComputeGradient in waves —
// one thread per worker, one shard at a time per worker (WorkerLeases, across jobs) — and sum what
// comes back once per shard (GradientAggregator): assembled first, or, for a shard of at least
// options.stream_into_sum_bytes, summed chunk by chunk as it arrives (no copy held; should it fail
// midway the round is computed again, assembling every shard, and that worker's shards are
// assembled from then on; the wave's calls still in flight are then cancelled, not waited for). A
// failed shard goes back, attempt + 1, to a worker that did not just fail (a ShardReassigned
// event); UNAVAILABLE (busy, draining, unreachable, lost)
// does not count against options.max_attempts, other failures do. While a wave runs, calls to
// workers that stop being live (LOST, LEFT, re-registered) are cancelled at once, so a frozen
// worker costs the registry's lost_after, not the shard's deadline.
//
// What workers return is checked before it counts (RoundCollector): a result that fails
// validation or the norm screen, or breaks the protocol, is a strike against its worker, and at
// JobSpec.quarantine_after strikes the worker is quarantined (WorkerQuarantined; no more shards of
// the job). A fraction JobSpec.verify_fraction of training shards (drawn from the seed) is also
// computed by a second worker; when the two disagree a third decides, the outvoted worker is
// quarantined and the round is computed again without it (ShardVerified events) — or, when results
// of earlier rounds it computed were never verified (VerificationLedger), the job goes back to the
// newest checkpoint before the first of them (RoundOutput::rolled_back_to).
//
// Thread safety: Run is called by the job runner's thread; CancelAll from any thread. The pointers
// in Deps must outlive the dispatcher.
#ifndef SLIMFIT_SERVER_SHARD_DISPATCHER_H_
#define SLIMFIT_SERVER_SHARD_DISPATCHER_H_

#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "performer/plan.h"
#include "proto/slimfit.pb.h"
#include "server/event_signal.h"
#include "server/job_data.h"
#include "server/job_record.h"
#include "server/norm_screen.h"
#include "server/round_collector.h"
#include "server/runner_options.h"
#include "server/state_store.h"
#include "server/verification_ledger.h"
#include "server/worker_leases.h"
#include "server/worker_planner.h"
#include "server/worker_registry.h"

namespace slimfit::server {

// What one round's shards added up to.
struct RoundOutput {
  std::vector<at::Tensor> gradient;  // in the job's dtype, model order; empty for an evaluation
  double loss_sum = 0;
  int64_t tokens = 0;
  int workers = 0;  // workers whose results counted
  int shards = 0;
  int reassigned = 0;       // shards that needed more than one attempt
  int recomputations = 0;   // times the round started over (RoundCompleted.recomputations)
  int streamed_shards = 0;  // shards summed as they arrived (RoundCompleted.streamed_shards)
  int verified = 0;         // spot-checked shards whose check settled
  // Workers with results counted that no spot check compared, and workers a spot check vouched for.
  std::set<std::string> unverified_workers;
  std::set<std::string> vouched_workers;
  // Where the round's time went (the dispatcher's parts and the workers' sums) and the bytes that
  // came back; the job runner adds the optimizer step and the parameter bytes served.
  v1::RoundTiming timing;
  // A local-steps round: inner steps the workers took, and the workers whose shards were dropped
  // for missing the round's deadline.
  int64_t inner_steps = 0;
  std::set<std::string> late_workers;
  // Set when the round did not complete: a worker was outvoted whose unverified results went into
  // earlier rounds; the job must restore its checkpoint of this round and go on from there.
  std::optional<int64_t> rolled_back_to;
};

class ShardDispatcher {
 public:
  struct Deps {
    JobRecord* record = nullptr;
    StateStore* store = nullptr;  // the job's checkpoints (where a rollback can go)
    WorkerRegistry* registry = nullptr;
    WorkerLeases* leases = nullptr;
    EventSignal* signal = nullptr;
    WorkerPlanner* planner = nullptr;
    const JobData* data = nullptr;
    RunnerOptions options;
    // The model's parameter names and shapes (gradients are checked against them), its dtype on
    // the wire, the token encoding and the FAVOR+ seed.
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> shapes;
    // JobSpec.trainable: the parameters whose gradients workers send (indices, increasing); the
    // round's gradient is zero for the others. Empty: all.
    std::vector<int> gradient_tensors;
    performer::DType dtype = performer::DType::kFloat32;
    bool bf16_products = false;  // JobSpec.bf16_products: the spot checks' tolerance
    v1::TokenEncoding encoding = v1::TOKEN_ENCODING_UINT8;
    uint64_t feature_seed = 0;   // also draws the spot-checked shards
    double verify_fraction = 0;  // JobSpec.verify_fraction
    int local_steps = 0;         // JobSpec.local_steps; 0: synchronous rounds
    // JobSpec.round_time_budget_seconds of a local-steps job; 0: none (every step, wait for all).
    double round_time_budget_seconds = 0;
    v1::Optimizer inner_optimizer;  // JobSpec.optimizer, sent with local steps
    // UpdateCompression.pseudo_gradients: how local-steps results travel (NONE: exact).
    v1::Compression pseudo_gradient_compression = v1::COMPRESSION_NONE;
    int quarantine_after = 3;                     // JobSpec.quarantine_after
    const std::atomic<bool>* stopping = nullptr;  // the runner's stop or cancel flag
    // Called on Run's thread while it waits for a wave or for workers (the job runner records a
    // checkpoint that finished meanwhile); never once Run has announced a rollback (it returns at
    // once). May be empty.
    std::function<void()> while_waiting;
    // Where shard deadlines are measured: a call still running when its deadline on this clock
    // passes is cancelled (DEADLINE_EXCEEDED; gRPC's own deadline, in real time, stays as a
    // backstop). Not owned; must outlive the dispatcher.
    base::Clock* clock = &base::RealClock();
  };

  explicit ShardDispatcher(Deps deps) : deps_(std::move(deps)) {}
  ShardDispatcher(const ShardDispatcher&) = delete;
  ShardDispatcher& operator=(const ShardDispatcher&) = delete;

  // Runs `sequences` against parameter `version`: every shard's gradient is ∇(its loss sum / the
  // predicted tokens of all `sequences`), so the sum is the gradient of their mean loss.
  // With `local_steps` (a local-steps round: `sequences` are that many consecutive batches of the
  // given sizes), each worker gets one shard holding its speed-proportional share of every batch
  // and returns its weighted pseudo-gradient (proto LocalSteps), so the sum is the token-weighted
  // mean of the workers' pseudo-gradients; FAILED_PRECONDITION when a worker's share does not fit
  // one request.
  // CANCELLED when the runner stops; UNAVAILABLE naming the shard when one fails max_attempts
  // times; FAILED_PRECONDITION when a spot check cannot be settled (two workers disagree and no
  // third is live, or three disagree); the planner's errors.
  absl::StatusOr<RoundOutput> Run(int64_t round, uint64_t version, const std::vector<SequenceRef>& sequences,
                                  bool evaluate_only, const std::vector<int64_t>& local_steps = {});

  // A round's gradient (RoundOutput::gradient) the runner is done with: its memory sums the next
  // round (no fresh allocation, no page faults for the largest buffer of a round).
  void Recycle(std::vector<at::Tensor> gradient);

  // The job went back to its checkpoint of `round` (after Run returned rolled_back_to).
  void RolledBack(int64_t round) { ledger_.RolledBack(round); }
  // After a coordinator restart: the quarantines and the verification ledger from the job's
  // events, oldest first. No events are emitted.
  void Replay(const std::vector<v1::JobEvent>& events);

  // Cancels every call in flight. REQUIRES: *deps.stopping was set first, so that a call starting
  // after this is cancelled as it registers.
  void CancelAll();

 private:
  // One computation of a shard by one worker: the shard itself, a second opinion on a spot-checked
  // shard, or a third after a disagreement.
  struct Task {
    int64_t id = 0;  // the shard
    std::vector<SequenceRef> sequences;
    int64_t expected_tokens = 0;
    int opinion = 1;    // 1: the shard; 2: a spot check; 3: a tiebreak
    bool fresh = true;  // not sent yet (a tiebreak waiting for its worker)
    int attempt = 1;    // sent to the worker: 1 + reassignments
    int failures = 0;   // attempts that count against RunnerOptions::max_attempts
    size_t worker = 0;  // index into the wave's plans
    std::string last_error;
    std::vector<int64_t> sequences_per_step;  // a local-steps shard: its sequences per inner step
    // A local-steps shard under a time budget: the token counts at its steps' boundaries (what the
    // worker may return, having taken fewer steps).
    std::vector<int64_t> step_token_counts;
    bool late = false;             // the last attempt missed its deadline or its worker stopped heartbeating
    bool stream_into_sum = false;  // summed as it arrives (RunnerOptions::stream_into_sum_bytes)
    int source =
        0;  // JobData source of its sequences (≥ 1: a worker-local dataset); a local-steps shard may mix
  };
  struct CallOutcome {
    absl::Status status;
    bool misbehaved = false;     // the worker broke the protocol or its result was rejected: a strike
    int64_t peak = 0;            // measured peak bytes the worker reported
    int64_t bytes_received = 0;  // the serialized messages the worker sent back
    double fetch_seconds = 0, compute_seconds = 0, stream_seconds = 0;  // its summary's, when it sent one
    int inner_steps = 0;                                                // its summary's local_steps
    bool gone = false;  // cancelled because the worker stopped heartbeating (or left)
    // Cancelled, or never started, because the round's sum was tainted meanwhile: the round is
    // computed again, so nothing of this call counts — and nothing of it is held against anyone.
    bool abandoned = false;
  };

  // One try at a round; *redo when a spot check outvoted a worker (quarantined now) whose other
  // results this round may be wrong too, or when a shard streamed into the sum failed midway.
  // `may_stream`: shards may be summed as they arrive (StreamsIntoSum); else all are assembled.
  absl::StatusOr<RoundOutput> RunOnce(int64_t round, uint64_t version,
                                      const std::vector<SequenceRef>& sequences, bool evaluate_only,
                                      const std::vector<int64_t>& local_steps, bool may_stream, bool* redo);
  std::vector<Task> CutRound(const std::vector<SequenceRef>& sequences,
                             const std::vector<WorkerPlan>& plans) const;
  absl::StatusOr<std::vector<Task>> CutLocalRound(int64_t round, const std::vector<SequenceRef>& sequences,
                                                  const std::vector<int64_t>& steps,
                                                  const std::vector<WorkerPlan>& plans) const;
  // Adds a second-opinion task, on another worker holding its data, for every shard drawn for a
  // spot check (none when no other worker holds it: the shard counts unverified).
  void AddSpotChecks(int64_t round, const std::vector<WorkerPlan>& plans, RoundCollector* collector,
                     std::vector<Task>* tasks) const;
  // Whether the worker may compute sequences of `source`: it holds that local dataset (any worker
  // for uploaded data, source 0).
  bool Holds(const WorkerPlan& plan, int source) const;
  // Whether the worker holds every local dataset the task reads.
  bool CanRun(const WorkerPlan& plan, const Task& task) const;
  // `sequences` shared out over the workers (index as `plans`): each worker's share grouped by
  // source, in proportion to speed, worker-local data only to its holders.
  std::vector<std::vector<SequenceRef>> ShareOut(const std::vector<SequenceRef>& sequences,
                                                 const std::vector<WorkerPlan>& plans) const;
  // The local datasets (JobData sources ≥ 1) among `sequences`.
  static std::set<int> LocalSourcesOf(const std::vector<SequenceRef>& sequences);
  // Whether the task's result is summed as it arrives (RunnerOptions::stream_into_sum_bytes).
  bool StreamsIntoSum(const WorkerPlan& plan, const Task& task, const RoundCollector& collector,
                      bool evaluate_only) const;
  // The bytes of one shard's gradient on the wire.
  int64_t ShardGradientBytes() const;
  // Runs `tasks` on their workers, one thread per worker (base::ThreadGroup); the outcome of each.
  // While the wave runs, calls to workers that stop serving, or of a round whose sum was tainted,
  // are cancelled and deps.while_waiting is called. INTERNAL when a thread ended with an exception
  // (LibTorch's, an allocation's): the wave's other calls are cancelled and the round fails.
  absl::StatusOr<std::vector<CallOutcome>> RunWave(int64_t round, uint64_t version, int64_t normalizer,
                                                   bool evaluate_only, const std::vector<WorkerPlan>& plans,
                                                   const std::vector<Task>& tasks, RoundCollector* collector);
  CallOutcome CallShard(const WorkerPlan& plan, const Task& task, int64_t round, uint64_t version,
                        int64_t normalizer, bool evaluate_only, RoundCollector* collector);
  // What the spot checks of one try at a round settled.
  struct Checked {
    std::set<int64_t> shards;       // shards verified
    std::set<std::string> vouched;  // workers a check vouched for
  };
  // Acts on settled spot checks: events, *checked, a tiebreak task into *tiebreaks, a quarantine
  // with *redo (this round again) or output->rolled_back_to (earlier rounds too).
  absl::Status Settle(int64_t round, const std::string& what, RoundCollector* collector,
                      const std::vector<Task>& shards, RoundOutput* output, Checked* checked,
                      std::vector<Task>* tiebreaks, bool* redo);
  // Gives every task in *failed a worker of the new plans (preferring workers not in
  // `failed_workers`; never one that already answered a checked shard); drops a spot check that no
  // other worker can do. The new plans.
  absl::StatusOr<std::vector<WorkerPlan>> Reassign(int64_t round, const std::string& what,
                                                   const std::vector<WorkerPlan>& previous,
                                                   const std::set<std::string>& failed_workers,
                                                   const std::map<int64_t, std::set<std::string>>& answered,
                                                   RoundCollector* collector, std::vector<Task>* failed);
  // A rejected result of `worker_id`: quarantined at deps.quarantine_after.
  void Strike(const std::string& worker_id, int64_t round, const std::string& why);
  // Shuts the worker out of the job: the planner skips it, `slimfit workers` shows why, and a
  // WorkerQuarantined event (`event`, with the worker, round and reason filled in here) says so.
  // No-op when it already is.
  void Quarantine(const std::string& worker_id, int64_t round, const std::string& reason,
                  v1::WorkerQuarantined event = {});
  // The newest checkpoint of a round before `round`.
  absl::StatusOr<int64_t> CheckpointBefore(int64_t round) const;
  // Cancels the calls in flight to workers that can no longer answer them (LOST, LEFT, or
  // re-registered as a new incarnation; DRAINING workers may finish theirs), and those whose
  // deadline on deps.clock has passed.
  void CancelCallsToGoneWorkers();
  // The round's sum is tainted and the round will be computed again: the wave's calls still in
  // flight are cancelled rather than waited for (their workers stop at their next check).
  void CancelCallsOfATaintedRound();
  bool stopping() const { return deps_.stopping->load(); }
  // The parameters whose gradients travel (deps.gradient_tensors, or all), as indices.
  std::vector<size_t> SentTensors() const;

  const Deps deps_;
  NormScreen screen_;                   // the job's recent per-token gradient norms
  std::vector<at::Tensor> spare_sum_;   // the last round's sum, to reuse (Recycle); runner thread only
  std::map<std::string, int> strikes_;  // rejected results per worker; runner thread only
  // Workers whose shard streamed into a sum failed midway: theirs are assembled from then on.
  std::set<std::string> assembled_workers_;  // runner thread only
  VerificationLedger ledger_;                // runner thread only

  // Bytes of gradients being assembled (CallShard: from a shard's first chunk until its result is
  // counted or refused), at most options.max_assembly_bytes unless a single shard is larger.
  class AssemblyRoom;
  absl::Mutex assembly_mutex_;
  int64_t assembly_bytes_ ABSL_GUARDED_BY(assembly_mutex_) = 0;

  absl::Mutex mutex_;
  // Calls in flight and the worker each goes to (id, incarnation).
  std::map<grpc::ClientContext*, std::pair<std::string, uint64_t>> in_flight_ ABSL_GUARDED_BY(mutex_);
  // Why a call in flight was cancelled: its worker went away (reported as UNAVAILABLE, not as a
  // failure; this reason wins over the other), or the round's sum was tainted (the call is
  // abandoned, CallOutcome::abandoned).
  // A call past its deadline on deps.clock (kDeadline) is reported as DEADLINE_EXCEEDED.
  enum class Cancelled { kWorkerGone, kRoundTainted, kDeadline };
  std::map<grpc::ClientContext*, Cancelled> cancelled_ ABSL_GUARDED_BY(mutex_);
  // The deadline of each call in flight, on deps.clock.
  std::map<grpc::ClientContext*, absl::Time> deadlines_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_SHARD_DISPATCHER_H_
