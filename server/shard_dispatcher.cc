#include "server/shard_dispatcher.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/thread.h"
#include "performer/performer_model.h"
#include "server/spot_checks.h"

namespace slimfit::server {

absl::StatusOr<RoundOutput> ShardDispatcher::Run(int64_t round, uint64_t version,
                                                 const std::vector<SequenceRef>& sequences,
                                                 bool evaluate_only,
                                                 const std::vector<int64_t>& local_steps) {
  for (int recomputations = 0;; ++recomputations) {
    bool redo = false;
    // A round computed again assembles every shard: it cannot be tainted again, so a round costs at
    // most one extra computation for shards summed as they arrived.
    absl::StatusOr<RoundOutput> output = RunOnce(round, version, sequences, evaluate_only, local_steps,
                                                 /*may_stream=*/recomputations == 0, &redo);
    if (!output.ok() || output->rolled_back_to.has_value()) return output;
    if (!redo) {
      if (!evaluate_only) ledger_.RoundCompleted(round, output->unverified_workers, output->vouched_workers);
      output->recomputations = recomputations;
      return output;
    }
    base::LogWarning(deps_.record->job_id(), ": round ", round, ": computing it again");
  }
}

absl::StatusOr<RoundOutput> ShardDispatcher::RunOnce(int64_t round, uint64_t version,
                                                     const std::vector<SequenceRef>& sequences,
                                                     bool evaluate_only,
                                                     const std::vector<int64_t>& local_steps, bool may_stream,
                                                     bool* redo) {
  const JobData& data = *deps_.data;
  const int64_t normalizer = std::max<int64_t>(1, data.PredictedTokens(sequences));
  const std::string what =
      evaluate_only ? absl::StrCat("evaluation after round ", round) : absl::StrCat("round ", round);

  // Where the time goes: planning and waiting for workers, waves of shards in flight, and the rest
  // (settling spot checks, collecting the sum) after each wave.
  absl::Time mark = absl::Now();
  auto take = [&mark]() {
    const absl::Time now = absl::Now();
    const double seconds = absl::ToDoubleSeconds(now - mark);
    mark = now;
    return seconds;
  };
  v1::RoundTiming timing;
  absl::StatusOr<std::vector<WorkerPlan>> plans =
      deps_.planner->PlanWorkers(round, LocalSourcesOf(sequences));
  if (!plans.ok()) return plans.status();
  timing.set_waiting_seconds(take());

  std::vector<Task> shards;
  if (local_steps.empty()) {
    shards = CutRound(sequences, *plans);
  } else {
    absl::StatusOr<std::vector<Task>> cut = CutLocalRound(round, sequences, local_steps, *plans);
    if (!cut.ok()) return cut.status();
    shards = *std::move(cut);
  }
  std::vector<int64_t> expected;
  for (const Task& shard : shards) expected.push_back(shard.expected_tokens);
  std::vector<std::vector<int64_t>> sent_shapes;
  for (const size_t index : SentTensors()) sent_shapes.push_back(deps_.shapes[index]);
  RoundCollector collector(
      round, version, expected, evaluate_only ? std::vector<std::vector<int64_t>>{} : sent_shapes,
      evaluate_only, normalizer, evaluate_only ? nullptr : &screen_,
      VerificationTolerance(deps_.dtype, deps_.bf16_products), performer::ToScalarType(deps_.dtype),
      evaluate_only ? std::vector<at::Tensor>{} : std::move(spare_sum_));
  if (!evaluate_only) spare_sum_.clear();
  // Unless this try's sum is the round's, the job's norm screen is left as before the try (the
  // round computed again, or the try failed: a later try must not find its norms twice). A rollback
  // to an earlier checkpoint keeps the norms of the rounds in between.
  bool sum_kept = false;
  absl::Cleanup restore_screen = [this, &sum_kept, before = screen_.Snapshot()]() mutable {
    if (!sum_kept) screen_.Restore(std::move(before));
  };
  for (const Task& shard : shards) {
    if (!shard.step_token_counts.empty()) collector.AllowTokenCounts(shard.id, shard.step_token_counts);
  }
  const bool drops_late = !local_steps.empty() && deps_.round_time_budget_seconds > 0;
  RoundOutput output;
  output.shards = static_cast<int>(shards.size());
  std::vector<Task> pending = shards;
  if (!evaluate_only) AddSpotChecks(round, *plans, &collector, &pending);
  std::map<int64_t, std::set<std::string>> answered;  // by shard: workers whose results are in
  std::set<int64_t> reassigned_shards;
  Checked checked;

  std::vector<WorkerPlan> wave_plans = *std::move(plans);
  while (!pending.empty()) {
    if (stopping()) return absl::CancelledError("stopped");
    for (Task& task : pending) {
      task.stream_into_sum =
          may_stream && StreamsIntoSum(wave_plans[task.worker], task, collector, evaluate_only);
    }
    absl::StatusOr<std::vector<CallOutcome>> wave =
        RunWave(round, version, normalizer, evaluate_only, wave_plans, pending, &collector);
    if (stopping()) return absl::CancelledError("stopped");
    if (!wave.ok())
      return absl::Status(wave.status().code(), absl::StrCat(what, ": ", wave.status().message()));
    const std::vector<CallOutcome> outcomes = *std::move(wave);
    timing.set_shards_seconds(timing.shards_seconds() + take());
    for (const CallOutcome& outcome : outcomes) {
      timing.set_worker_fetch_seconds(timing.worker_fetch_seconds() + outcome.fetch_seconds);
      timing.set_worker_compute_seconds(timing.worker_compute_seconds() + outcome.compute_seconds);
      timing.set_worker_stream_seconds(timing.worker_stream_seconds() + outcome.stream_seconds);
      timing.set_bytes_from_workers(timing.bytes_from_workers() + outcome.bytes_received);
      if (outcome.status.ok()) output.inner_steps += outcome.inner_steps;
    }

    std::vector<Task> failed;
    std::set<std::string> failed_workers;
    for (size_t i = 0; i < pending.size(); ++i) {
      const WorkerPlan& plan = wave_plans[pending[i].worker];
      const CallOutcome& outcome = outcomes[i];
      const bool ok = outcome.status.ok() || outcome.status.code() == absl::StatusCode::kAlreadyExists;
      if (outcome.abandoned) continue;  // the round is computed again (the taint below)
      deps_.registry->RecordShard(plan.worker.worker_id, ok, outcome.peak);
      if (ok) {
        if (outcome.status.ok() && pending[i].stream_into_sum) ++output.streamed_shards;
        answered[pending[i].id].insert(plan.worker.worker_id);
        if (!evaluate_only) deps_.planner->MaybeReplan(plan, outcome.peak, round + 1);
        continue;
      }
      Task task = pending[i];
      task.last_error = std::string(outcome.status.message());
      task.late = outcome.status.code() == absl::StatusCode::kDeadlineExceeded || outcome.gone;
      failed_workers.insert(plan.worker.worker_id);
      if (outcome.misbehaved) {
        // The worker's fault, not the shard's: it does not count against max_attempts (quarantine
        // bounds how often one worker can fail this way).
        Strike(plan.worker.worker_id, round, absl::StrCat(what, " shard ", task.id, ": ", task.last_error));
      } else {
        if (outcome.status.code() == absl::StatusCode::kResourceExhausted) deps_.planner->Refuse(plan.worker);
        // A busy, draining or unreachable worker (UNAVAILABLE) says nothing about the shard: only
        // other failures count against max_attempts. A dead worker stops being offered work once it
        // is LOST.
        if (outcome.status.code() != absl::StatusCode::kUnavailable) ++task.failures;
        if (task.failures >= deps_.options.max_attempts) {
          return absl::UnavailableError(absl::StrCat(what, ": shard ", task.id, " failed ", task.failures,
                                                     " times; last: ", task.last_error));
        }
      }
      ++task.attempt;
      failed.push_back(std::move(task));
    }
    // The wave's spot checks are settled first, tainted sum or not: an outvoted worker is
    // quarantined (or the job rolled back) on this evidence.
    if (absl::Status settled = Settle(round, what, &collector, shards, &output, &checked, &failed, redo);
        !settled.ok()) {
      return settled;
    }
    if (output.rolled_back_to.has_value()) return output;
    if (const std::string tainted = collector.tainted(); !tainted.empty()) {
      // A shard summed as it arrived failed midway: its values cannot be taken back out of the
      // sum, so the round starts over, and the worker's shards are assembled from now on.
      const std::set<std::string> workers = collector.tainting_workers();
      assembled_workers_.insert(workers.begin(), workers.end());
      const int64_t abandoned = std::count_if(outcomes.begin(), outcomes.end(),
                                              [](const CallOutcome& outcome) { return outcome.abandoned; });
      base::LogWarning(deps_.record->job_id(), ": ", what, ": ", tainted, "; the sum cannot be mended (",
                       absl::StrJoin(workers, ", "), ": assembled before summing from now on)",
                       abandoned > 0 ? absl::StrCat("; ", abandoned, " of the wave's calls abandoned") : "");
      *redo = true;
    }
    if (*redo) {
      spare_sum_ = collector.gradient();  // zeroed and summed into again
      return output;
    }
    if (drops_late && !failed.empty() && collector.shards_counted() > 0) {
      // Under a time budget the round goes on with what arrived: the shard of a worker that missed
      // the deadline (or stopped heartbeating) is dropped, never applied later (it would be computed
      // from a version the job has left). Other failures are retried as without a budget.
      std::vector<Task> retried;
      for (Task& task : failed) {
        if (!task.late) {
          retried.push_back(std::move(task));
          continue;
        }
        if (absl::Status dropped = collector.Drop(task.id); !dropped.ok()) return dropped;
        output.late_workers.insert(wave_plans[task.worker].worker.worker_id);
        base::LogWarning(deps_.record->job_id(), ": ", what, ": dropped the shard of ",
                         wave_plans[task.worker].worker.worker_id, " (", task.last_error, ")");
      }
      failed = std::move(retried);
    }
    if (failed.empty()) break;
    for (const Task& task : failed) {
      if (!task.fresh) reassigned_shards.insert(task.id);
    }
    timing.set_aggregation_seconds(timing.aggregation_seconds() + take());
    absl::StatusOr<std::vector<WorkerPlan>> replanned =
        Reassign(round, what, wave_plans, failed_workers, answered, &collector, &failed);
    if (!replanned.ok()) return replanned.status();
    timing.set_waiting_seconds(timing.waiting_seconds() + take());
    pending = std::move(failed);
    wave_plans = *std::move(replanned);
  }
  if (!collector.complete()) return absl::InternalError(absl::StrCat(what, ": aggregation incomplete"));
  output.loss_sum = collector.loss_sum();
  output.tokens = collector.token_count();
  if (!evaluate_only) {
    std::vector<at::Tensor> sent = collector.gradient();
    // Under a time budget the results cover fewer tokens than the normaliser: divide by what
    // arrived, so the step is the token-weighted mean of the pseudo-gradients that came.
    if (drops_late && collector.token_count() > 0 && collector.token_count() < normalizer) {
      const double scale = static_cast<double>(normalizer) / static_cast<double>(collector.token_count());
      for (at::Tensor& tensor : sent) tensor.mul_(scale);
    }
    if (deps_.gradient_tensors.empty()) {
      output.gradient = std::move(sent);
    } else {
      // Frozen parameters' gradients are zero (one element broadcast: the step ignores them); only
      // the trainable ones travelled.
      for (const std::vector<int64_t>& shape : deps_.shapes) {
        output.gradient.push_back(at::zeros({}, performer::ToScalarType(deps_.dtype)).expand(shape));
      }
      const std::vector<size_t> indices = SentTensors();
      for (size_t i = 0; i < indices.size(); ++i) output.gradient[indices[i]] = std::move(sent[i]);
    }
  }
  const std::map<std::string, std::set<int64_t>> contributions = collector.contributions();
  output.workers = static_cast<int>(contributions.size());
  for (const auto& [worker, counted] : contributions) {
    for (int64_t shard : counted) {
      if (checked.shards.count(shard) == 0) output.unverified_workers.insert(worker);
    }
  }
  output.vouched_workers = std::move(checked.vouched);
  output.reassigned = static_cast<int>(reassigned_shards.size());
  timing.set_aggregation_seconds(timing.aggregation_seconds() + take());
  output.timing = std::move(timing);
  sum_kept = true;
  return output;
}

bool ShardDispatcher::StreamsIntoSum(const WorkerPlan& plan, const Task& task,
                                     const RoundCollector& collector, bool evaluate_only) const {
  // Spot-checked results are compared whole; a worker with a strike may be refused again; a
  // local-steps round is not computed again (its workers' inner optimizers would step twice), and
  // under a time budget it drops late shards, which must not be half in the sum.
  return !evaluate_only && task.sequences_per_step.empty() && task.opinion == 1 &&
         !collector.IsChecked(task.id) && ShardGradientBytes() >= deps_.options.stream_into_sum_bytes &&
         assembled_workers_.count(plan.worker.worker_id) == 0 && strikes_.count(plan.worker.worker_id) == 0;
}

int64_t ShardDispatcher::ShardGradientBytes() const {
  int64_t bytes = 0;
  for (const size_t i : SentTensors()) {
    int64_t elements = 1;
    for (const int64_t extent : deps_.shapes[i]) elements *= extent;
    bytes += elements * performer::DTypeBytes(deps_.dtype);
  }
  return bytes;
}

absl::StatusOr<std::vector<ShardDispatcher::CallOutcome>> ShardDispatcher::RunWave(
    int64_t round, uint64_t version, int64_t normalizer, bool evaluate_only,
    const std::vector<WorkerPlan>& plans, const std::vector<Task>& tasks, RoundCollector* collector) {
  // One thread per worker with tasks in this wave; each runs its tasks in order.
  std::vector<std::vector<size_t>> by_worker(plans.size());
  for (size_t i = 0; i < tasks.size(); ++i) by_worker[tasks[i].worker].push_back(i);
  // Each thread writes the outcomes of its own tasks only; they are read after JoinAll.
  std::vector<CallOutcome> outcomes(tasks.size());
  base::ThreadGroup wave;
  for (size_t w = 0; w < plans.size(); ++w) {
    if (by_worker[w].empty()) continue;
    const WorkerPlan& plan = plans[w];
    const std::vector<size_t>& mine = by_worker[w];
    wave.Start(absl::StrCat("shards ", plan.worker.worker_id),
               [this, &plan, &mine, &tasks, &outcomes, &wave, collector, round, version, normalizer,
                evaluate_only]() -> absl::Status {
                 const WorkerHandle& worker = plan.worker;
                 // Only a shard streamed into the sum taints it, and evaluations and local-steps rounds
                 // never stream (StreamsIntoSum): their tasks are never abandoned for a taint. A wave
                 // one of whose threads failed is abandoned whole (the round fails).
                 auto abandon = [&](size_t i) {
                   const bool tainted = !collector->tainted().empty();
                   if (!tainted && !wave.failed()) return false;
                   outcomes[i].status = absl::AbortedError(
                       tainted ? "the round's sum was tainted; not started" : "the wave failed; not started");
                   outcomes[i].abandoned = true;
                   return true;
                 };
                 if (abandon(mine.front())) {
                   for (size_t i : mine) abandon(i);
                   return absl::OkStatus();
                 }
                 std::shared_ptr<void> lease = deps_.leases->Acquire(worker.worker_id, deps_.stopping);
                 for (size_t i : mine) {
                   if (lease == nullptr || stopping()) {
                     outcomes[i].status = absl::CancelledError("stopped");
                   } else if (abandon(i)) {
                     continue;
                   } else if (!deps_.registry->IsServing(worker.worker_id, worker.incarnation)) {
                     outcomes[i].status =
                         absl::UnavailableError(absl::StrCat("worker ", worker.worker_id, " is gone"));
                   } else {
                     outcomes[i] =
                         CallShard(plan, tasks[i], round, version, normalizer, evaluate_only, collector);
                   }
                 }
                 return absl::OkStatus();
               });
  }
  // Until the last thread ends (each end wakes this loop at once): a worker that stops heartbeating
  // (LOST) has its call cancelled rather than left to run to the shard's deadline, and so have the
  // calls of a tainted round or of a wave one of whose threads failed. Looked at again every
  // kWaveWatchInterval while no thread ends: the registry and the runner's checkpoint announce
  // nothing.
  constexpr absl::Duration kWaveWatchInterval = absl::Milliseconds(200);
  bool all_ended = false;
  while (!all_ended) {
    CancelCallsToGoneWorkers();
    if (!collector->tainted().empty() || wave.failed()) CancelCallsOfATaintedRound();
    if (deps_.while_waiting) deps_.while_waiting();
    all_ended = wave.WaitForAnEnd(kWaveWatchInterval);
  }
  if (absl::Status joined = wave.JoinAll(); !joined.ok()) {
    base::LogError(deps_.record->job_id(), ": round ", round, ": ", joined.message());
    return joined;
  }
  return outcomes;
}

absl::Status ShardDispatcher::Settle(int64_t round, const std::string& what, RoundCollector* collector,
                                     const std::vector<Task>& shards, RoundOutput* output, Checked* checked,
                                     std::vector<Task>* tiebreaks, bool* redo) {
  const double tolerance = VerificationTolerance(deps_.dtype, deps_.bf16_products);
  for (RoundCollector::Verdict& verdict : collector->TakeVerdicts()) {
    const SpotChecks::Decision& decision = verdict.decision;
    using Kind = SpotChecks::Decision::Kind;
    const std::string workers = absl::StrJoin(decision.workers, ", ");
    if (decision.kind == Kind::kNeedsTiebreak) {
      Task tiebreak = shards[static_cast<size_t>(verdict.shard_id)];
      tiebreak.opinion = 3;
      tiebreak.fresh = true;
      tiebreaks->push_back(std::move(tiebreak));
      base::LogWarning(deps_.record->job_id(), ": ", what, " shard ", verdict.shard_id, ": workers ", workers,
                       absl::StrFormat(" disagree (relative difference %.3g > %.3g); asking a third",
                                       decision.difference, tolerance));
      continue;
    }
    if (decision.kind == Kind::kUnresolvable) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": shard ", verdict.shard_id, ": workers ", workers,
                       " returned three different results; no two agree, so none can be trusted"));
    }
    ++output->verified;
    v1::JobEvent event;
    v1::ShardVerified* verified = event.mutable_shard_verified();
    verified->set_round(round);
    verified->set_shard_id(verdict.shard_id);
    for (const std::string& worker : decision.workers) verified->add_worker_ids(worker);
    verified->set_relative_difference(decision.difference);
    verified->set_tolerance(tolerance);
    verified->set_agreed(decision.kind == Kind::kAgreed);
    if (decision.kind == Kind::kResolved) verified->set_odd_worker_id(decision.odd);
    checked->shards.insert(verdict.shard_id);
    const std::set<std::string> vouched = VerificationLedger::Vouched(*verified);
    checked->vouched.insert(vouched.begin(), vouched.end());
    deps_.record->Emit(std::move(event));
    if (decision.kind != Kind::kResolved || deps_.planner->IsQuarantined(decision.odd)) continue;

    const std::string reason =
        absl::StrCat("outvoted on ", what, " shard ", verdict.shard_id,
                     ": its gradient disagrees with those of the others (", workers, ")");
    std::map<std::string, std::set<int64_t>> contributions = collector->contributions();
    v1::WorkerQuarantined quarantined;
    quarantined.set_recomputed_shards(static_cast<int>(contributions[decision.odd].size()));
    // Its unverified results of earlier rounds may be lies too: back to the checkpoint before them.
    const int64_t since = ledger_.SuspectSince(decision.odd);
    if (since > 0 && since < round) {
      absl::StatusOr<int64_t> back = CheckpointBefore(since);
      if (!back.ok()) return back.status();
      quarantined.set_recompute_from_round(since);
      quarantined.set_rolled_back_to_round(*back);
      output->rolled_back_to = *back;
    } else if (quarantined.recomputed_shards() > 0) {
      *redo = true;  // its results of this round counted: the round starts over
      base::LogWarning(deps_.record->job_id(), ": ", what, ": results of ", decision.odd,
                       " counted; the round starts over without it");
    }
    Quarantine(decision.odd, round, reason, std::move(quarantined));
    if (output->rolled_back_to.has_value()) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ShardDispatcher::CheckpointBefore(int64_t round) const {
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints =
      deps_.store->Checkpoints(deps_.record->job_id());
  if (!checkpoints.ok()) return checkpoints.status();
  int64_t newest = -1;
  for (const CheckpointRecord& checkpoint : *checkpoints) {
    if (checkpoint.round < round) newest = std::max(newest, checkpoint.round);
  }
  if (newest < 0) {
    return absl::InternalError(
        absl::StrCat("no checkpoint of ", deps_.record->job_id(), " before round ", round));
  }
  return newest;
}

absl::StatusOr<std::vector<WorkerPlan>> ShardDispatcher::Reassign(
    int64_t round, const std::string& what, const std::vector<WorkerPlan>& previous,
    const std::set<std::string>& failed_workers, const std::map<int64_t, std::set<std::string>>& answered,
    RoundCollector* collector, std::vector<Task>* failed) {
  // Wait, if need be, until some worker holds the data of every failed shard.
  std::set<int> sources;
  for (const Task& task : *failed) {
    const std::set<int> of_task = LocalSourcesOf(task.sequences);
    sources.insert(of_task.begin(), of_task.end());
  }
  absl::StatusOr<std::vector<WorkerPlan>> replanned = deps_.planner->PlanWorkers(round, sources);
  if (!replanned.ok()) return replanned.status();
  const std::vector<WorkerPlan>& plans = *replanned;
  std::vector<size_t> preferred;
  for (size_t w = 0; w < plans.size(); ++w) {
    if (failed_workers.count(plans[w].worker.worker_id) == 0) preferred.push_back(w);
  }
  if (preferred.empty()) deps_.signal->WaitAfter(deps_.signal->count(), absl::Milliseconds(500));  // back off
  // A checked shard's opinions come from different workers: those that answered, and those given
  // another copy of it now.
  std::map<int64_t, std::set<std::string>> taken = answered;
  std::vector<Task> assigned;
  size_t next = 0;
  for (Task& task : *failed) {
    const bool checked = collector->IsChecked(task.id);
    auto allowed = [&](size_t w) {
      return CanRun(plans[w], task) && (!checked || taken[task.id].count(plans[w].worker.worker_id) == 0);
    };
    std::vector<size_t> eligible;
    for (size_t w : preferred) {
      if (allowed(w)) eligible.push_back(w);
    }
    for (size_t w = 0; eligible.empty() && w < plans.size(); ++w) {
      if (allowed(w)) eligible.push_back(w);
    }
    if (eligible.empty() && std::none_of(plans.begin(), plans.end(),
                                         [&](const WorkerPlan& plan) { return CanRun(plan, task); })) {
      return absl::UnavailableError(absl::StrCat(what, ": shard ", task.id, " (last error: ", task.last_error,
                                                 "): no live worker holds all the local datasets it reads"));
    }
    if (eligible.empty()) {
      auto it = answered.find(task.id);
      const std::set<std::string> opinions = it == answered.end() ? std::set<std::string>{} : it->second;
      if (task.opinion == 3 || opinions.size() >= 2) {
        return absl::FailedPreconditionError(
            absl::StrCat(what, ": shard ", task.id, ": workers ", absl::StrJoin(opinions, ", "),
                         " disagree and no other eligible worker is live to decide which is right "
                         "(verification needs three "
                         "workers to settle a disagreement; JobSpec.verify_fraction 0 turns it off)"));
      }
      // No other worker for a second opinion: the shard counts unverified.
      if (absl::Status abandoned = collector->AbandonCheck(task.id); !abandoned.ok()) return abandoned;
      base::LogWarning(deps_.record->job_id(), ": ", what, " shard ", task.id,
                       ": no other worker for its spot check; it counts unverified");
      continue;
    }
    const size_t w = eligible[next++ % eligible.size()];
    if (checked) taken[task.id].insert(plans[w].worker.worker_id);
    if (!task.fresh) {
      const std::string from = previous[task.worker].worker.worker_id;
      v1::JobEvent event;
      v1::ShardReassigned* moved = event.mutable_shard_reassigned();
      moved->set_round(round);
      moved->set_shard_id(task.id);
      moved->set_from_worker_id(from);
      moved->set_reason(task.last_error);
      moved->set_next_attempt(task.attempt);
      deps_.record->Emit(std::move(event));
      base::LogWarning(deps_.record->job_id(), ": ", what, " shard ", task.id, " on ", from, " failed (",
                       task.last_error, "); attempt ", task.attempt, " on ", plans[w].worker.worker_id);
    }
    task.worker = w;
    task.fresh = false;
    assigned.push_back(std::move(task));
  }
  *failed = std::move(assigned);
  return replanned;
}

void ShardDispatcher::Recycle(std::vector<at::Tensor> gradient) {
  spare_sum_.clear();
  if (gradient.size() != deps_.shapes.size()) return;
  for (const size_t index : SentTensors()) spare_sum_.push_back(std::move(gradient[index]));
}

std::vector<size_t> ShardDispatcher::SentTensors() const {
  std::vector<size_t> indices;
  if (deps_.gradient_tensors.empty()) {
    for (size_t i = 0; i < deps_.shapes.size(); ++i) indices.push_back(i);
  } else {
    for (const int index : deps_.gradient_tensors) indices.push_back(static_cast<size_t>(index));
  }
  return indices;
}

void ShardDispatcher::Strike(const std::string& worker_id, int64_t round, const std::string& why) {
  const int strikes = ++strikes_[worker_id];
  base::LogWarning(deps_.record->job_id(), ": result of worker ", worker_id, " rejected (", strikes, " of ",
                   deps_.quarantine_after, " before quarantine): ", why);
  if (strikes >= deps_.quarantine_after) {
    Quarantine(worker_id, round, absl::StrCat(strikes, " results rejected; last: ", why));
  }
}

void ShardDispatcher::Quarantine(const std::string& worker_id, int64_t round, const std::string& reason,
                                 v1::WorkerQuarantined event) {
  if (!deps_.planner->Quarantine(worker_id)) return;
  deps_.registry->AddQuarantine(worker_id, deps_.record->job_id(), reason);
  event.set_round(round);
  event.set_worker_id(worker_id);
  event.set_reason(reason);
  v1::JobEvent job_event;
  *job_event.mutable_worker_quarantined() = event;
  deps_.record->Emit(std::move(job_event));
  if (event.has_rolled_back_to_round()) {
    base::LogWarning(deps_.record->job_id(), ": worker ", worker_id, " quarantined: ", reason,
                     "; its unverified results since round ", event.recompute_from_round(),
                     " are undone: back to the checkpoint of round ", event.rolled_back_to_round());
  } else {
    base::LogWarning(deps_.record->job_id(), ": worker ", worker_id, " quarantined: ", reason);
  }
}

void ShardDispatcher::Replay(const std::vector<v1::JobEvent>& events) {
  for (const v1::JobEvent& event : events) {
    if (!event.has_worker_quarantined()) continue;
    const v1::WorkerQuarantined& quarantined = event.worker_quarantined();
    if (deps_.planner->Quarantine(quarantined.worker_id())) {
      deps_.registry->AddQuarantine(quarantined.worker_id(), deps_.record->job_id(), quarantined.reason());
    }
  }
  ledger_.Replay(events);
}

}  // namespace slimfit::server
