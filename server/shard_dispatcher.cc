#include "server/shard_dispatcher.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "performer/tensor_chunks.h"
#include "planner/plan_proto.h"
#include "proto/rpc_util.h"
#include "proto/token_codec.h"
#include "server/shard_split.h"

namespace slimfit::server {

std::vector<ShardDispatcher::Shard> ShardDispatcher::CutRound(const std::vector<SequenceRef>& sequences,
                                                              const std::vector<WorkerPlan>& plans) const {
  // Each worker's speed-proportional share, cut to fit one request: at most a request's bytes of
  // tokens and LIMIT_MAX_SHARD_DOC_STARTS document starts.
  std::vector<double> speeds;
  for (const WorkerPlan& plan : plans) speeds.push_back(plan.tokens_per_second);
  const JobData& data = *deps_.data;
  int64_t per_shard = MaxSequencesPerShard(data.sequence_length(), rpc::TokenWidth(deps_.encoding));
  if (deps_.options.max_sequences_per_shard > 0) per_shard = std::min(per_shard, deps_.options.max_sequences_per_shard);
  const std::vector<ShardCut> cuts =
      CutShards(SplitBySpeed(static_cast<int64_t>(sequences.size()), speeds), per_shard,
                v1::LIMIT_MAX_SHARD_DOC_STARTS,
                [&](int64_t i) { return data.DocumentsIn(sequences[static_cast<size_t>(i)]); });
  std::vector<Shard> shards;
  for (const ShardCut& cut : cuts) {
    Shard shard;
    shard.id = static_cast<int64_t>(shards.size());
    shard.sequences.assign(sequences.begin() + cut.begin, sequences.begin() + cut.end);
    shard.expected_tokens = data.PredictedTokens(shard.sequences);
    shard.worker = cut.worker;
    shards.push_back(std::move(shard));
  }
  return shards;
}

absl::StatusOr<RoundOutput> ShardDispatcher::Run(int64_t round, uint64_t version,
                                                 const std::vector<SequenceRef>& sequences, bool evaluate_only) {
  const JobData& data = *deps_.data;
  const int64_t normalizer = std::max<int64_t>(1, data.PredictedTokens(sequences));
  const std::string what = evaluate_only ? absl::StrCat("evaluation after round ", round) : absl::StrCat("round ", round);

  absl::StatusOr<std::vector<WorkerPlan>> plans = deps_.planner->PlanWorkers(round);
  if (!plans.ok()) return plans.status();

  std::vector<Shard> shards = CutRound(sequences, *plans);
  std::vector<int64_t> expected;
  for (const Shard& shard : shards) expected.push_back(shard.expected_tokens);
  GradientAggregator aggregator(round, version, expected, evaluate_only ? std::vector<std::vector<int64_t>>{} : deps_.shapes,
                                evaluate_only);
  RoundOutput output;
  output.shards = static_cast<int>(shards.size());
  std::set<std::string> contributors;
  std::set<int64_t> reassigned_shards;

  std::vector<Shard> pending = std::move(shards);
  std::vector<WorkerPlan> wave_plans = *std::move(plans);
  while (!pending.empty()) {
    if (stopping()) return absl::CancelledError("stopped");
    // One thread per worker with shards in this wave; each runs its shards in order.
    std::vector<std::vector<size_t>> by_worker(wave_plans.size());
    for (size_t i = 0; i < pending.size(); ++i) by_worker[pending[i].worker].push_back(i);
    std::vector<absl::Status> results(pending.size());
    std::vector<int64_t> peaks(pending.size(), 0);
    std::vector<std::thread> threads;
    std::atomic<int> running{0};
    for (size_t w = 0; w < wave_plans.size(); ++w) {
      if (by_worker[w].empty()) continue;
      ++running;
      threads.emplace_back([&, w] {
        struct Done {
          std::atomic<int>* running;
          ~Done() { --*running; }
        } done{&running};
        const WorkerHandle& worker = wave_plans[w].worker;
        std::shared_ptr<void> lease = deps_.leases->Acquire(worker.worker_id, deps_.stopping);
        for (size_t i : by_worker[w]) {
          if (lease == nullptr || stopping()) {
            results[i] = absl::CancelledError("stopped");
          } else if (!deps_.registry->IsServing(worker.worker_id, worker.incarnation)) {
            results[i] = absl::UnavailableError(absl::StrCat("worker ", worker.worker_id, " is gone"));
          } else {
            results[i] = CallShard(wave_plans[w], pending[i], round, version, normalizer, evaluate_only,
                                   &aggregator, &peaks[i]);
          }
        }
      });
    }
    // While the wave runs, a worker that stops heartbeating (LOST) has its call cancelled at once
    // rather than at the shard's deadline.
    while (running.load() > 0) {
      CancelCallsToGoneWorkers();
      deps_.signal->WaitAfter(deps_.signal->count(), absl::Milliseconds(200));
    }
    for (std::thread& thread : threads) thread.join();
    if (stopping()) return absl::CancelledError("stopped");

    std::vector<Shard> failed;
    std::set<std::string> failed_workers;
    for (size_t i = 0; i < pending.size(); ++i) {
      const WorkerPlan& plan = wave_plans[pending[i].worker];
      const bool ok = results[i].ok() || results[i].code() == absl::StatusCode::kAlreadyExists;
      deps_.registry->RecordShard(plan.worker.worker_id, ok, peaks[i]);
      if (ok) {
        contributors.insert(plan.worker.worker_id);
        if (!evaluate_only) deps_.planner->MaybeReplan(plan, peaks[i], round + 1);
        continue;
      }
      Shard shard = pending[i];
      shard.last_error = std::string(results[i].message());
      if (results[i].code() == absl::StatusCode::kResourceExhausted) deps_.planner->Refuse(plan.worker);
      failed_workers.insert(plan.worker.worker_id);
      // A busy, draining or unreachable worker (UNAVAILABLE) says nothing about the shard: only other
      // failures count against max_attempts. A dead worker stops being offered work once it is LOST.
      if (results[i].code() != absl::StatusCode::kUnavailable) ++shard.failures;
      if (shard.failures >= deps_.options.max_attempts) {
        return absl::UnavailableError(absl::StrCat(what, ": shard ", shard.id, " failed ", shard.failures,
                                                   " times; last: ", shard.last_error));
      }
      ++shard.attempt;
      failed.push_back(std::move(shard));
    }
    if (failed.empty()) break;

    // Reassign: prefer live workers that did not just fail.
    absl::StatusOr<std::vector<WorkerPlan>> replanned = deps_.planner->PlanWorkers(round);
    if (!replanned.ok()) return replanned.status();
    std::vector<size_t> preferred;
    for (size_t w = 0; w < replanned->size(); ++w) {
      if (failed_workers.count((*replanned)[w].worker.worker_id) == 0) preferred.push_back(w);
    }
    if (preferred.empty()) {
      for (size_t w = 0; w < replanned->size(); ++w) preferred.push_back(w);
      deps_.signal->WaitAfter(deps_.signal->count(), absl::Milliseconds(500));  // back off before retrying
    }
    for (size_t k = 0; k < failed.size(); ++k) {
      Shard& shard = failed[k];
      const std::string from = wave_plans[shard.worker].worker.worker_id;
      shard.worker = preferred[k % preferred.size()];
      reassigned_shards.insert(shard.id);
      v1::JobEvent event;
      v1::ShardReassigned* moved = event.mutable_shard_reassigned();
      moved->set_round(round);
      moved->set_shard_id(shard.id);
      moved->set_from_worker_id(from);
      moved->set_reason(shard.last_error);
      moved->set_next_attempt(shard.attempt);
      deps_.record->Emit(std::move(event));
      base::LogWarning(deps_.record->job_id(), ": ", what, " shard ", shard.id, " on ", from, " failed (", shard.last_error,
                      "); attempt ", shard.attempt, " on ", (*replanned)[shard.worker].worker.worker_id);
    }
    pending = std::move(failed);
    wave_plans = *std::move(replanned);
  }
  if (!aggregator.complete()) return absl::InternalError(absl::StrCat(what, ": aggregation incomplete"));
  output.loss_sum = aggregator.loss_sum();
  output.tokens = aggregator.token_count();
  if (!evaluate_only) output.gradient = aggregator.gradient();
  output.workers = static_cast<int>(contributors.size());
  output.reassigned = static_cast<int>(reassigned_shards.size());
  return output;
}

absl::Status ShardDispatcher::CallShard(const WorkerPlan& plan, const Shard& shard, int64_t round, uint64_t version,
                                  int64_t normalizer, bool evaluate_only, GradientAggregator* aggregator,
                                  int64_t* measured_peak) {
  v1::ComputeGradientRequest request;
  request.set_job_id(deps_.record->job_id());
  request.set_round(round);
  request.set_shard_id(shard.id);
  request.set_attempt(shard.attempt);
  request.set_parameter_version(version);
  *request.mutable_plan() = planner::PlanToProto(plan.candidate.plan);
  request.set_sequence_length(deps_.data->sequence_length());
  request.set_token_encoding(deps_.encoding);
  std::vector<int64_t> tokens, doc_starts;
  deps_.data->Gather(shard.sequences, &tokens, &doc_starts);
  absl::StatusOr<std::string> encoded = rpc::EncodeTokens(tokens, deps_.encoding);
  if (!encoded.ok()) return encoded.status();
  request.set_tokens(*std::move(encoded));
  for (int64_t start : doc_starts) request.add_doc_starts(start);
  request.set_loss_normalizer(normalizer);
  request.set_feature_seed(deps_.feature_seed);
  request.set_evaluate_only(evaluate_only);

  const double predicted = plan.candidate.prediction.seconds * static_cast<double>(shard.sequences.size());
  auto context = rpc::MakeClientContext(
      plan.worker.call_token,
      std::chrono::milliseconds(absl::ToInt64Milliseconds(deps_.options.shard_timeout + absl::Seconds(10 * predicted))));
  {
    absl::MutexLock lock(&mutex_);
    in_flight_[context.get()] = {plan.worker.worker_id, plan.worker.incarnation};
    if (stopping()) context->TryCancel();
  }
  struct Untrack {
    ShardDispatcher* dispatcher;
    grpc::ClientContext* context;
    ~Untrack() {
      absl::MutexLock lock(&dispatcher->mutex_);
      dispatcher->in_flight_.erase(context);
      dispatcher->cancelled_gone_.erase(context);
    }
  } untrack{this, context.get()};

  std::vector<performer::TensorSpec> specs;
  for (size_t i = 0; i < deps_.shapes.size(); ++i) specs.push_back({deps_.names[i], deps_.shapes[i]});
  performer::TensorAssembler assembler(std::move(specs), deps_.dtype,
                                       absl::StrCat("gradient of round ", round, " shard ", shard.id, " from ",
                                                    plan.worker.worker_id));
  std::unique_ptr<grpc::ClientReaderInterface<v1::ComputeGradientResponse>> reader =
      plan.worker.stub->ComputeGradient(context.get(), request);
  v1::ComputeGradientResponse response;
  std::optional<v1::GradientSummary> summary;
  absl::Status stream_error;
  while (reader->Read(&response)) {
    if (!stream_error.ok()) continue;
    if (response.has_chunk()) {
      if (evaluate_only || summary.has_value()) {
        stream_error = absl::InvalidArgumentError("unexpected gradient chunk");
      } else {
        stream_error = assembler.Add(response.chunk());
      }
      if (!stream_error.ok()) context->TryCancel();
    } else if (response.has_summary()) {
      summary = response.summary();
    }
  }
  grpc::Status finished = reader->Finish();
  {
    absl::MutexLock lock(&mutex_);
    if (cancelled_gone_.count(context.get()) > 0) {
      return absl::UnavailableError(absl::StrCat("worker ", plan.worker.worker_id,
                                                 " stopped heartbeating; its call was cancelled"));
    }
  }
  if (!stream_error.ok()) return stream_error;
  if (!finished.ok()) {
    return rpc::FromGrpcStatus(finished, absl::StrCat("worker ", plan.worker.worker_id), context.get());
  }
  if (!summary.has_value()) return absl::InvalidArgumentError("stream ended without a summary");
  if (summary->job_id() != deps_.record->job_id() || summary->shard_id() != shard.id || summary->attempt() != shard.attempt) {
    return absl::InvalidArgumentError("summary does not echo the request");
  }
  *measured_peak = summary->measured_peak_bytes();
  ShardResult result;
  result.summary = *summary;
  if (!evaluate_only) {
    absl::StatusOr<std::vector<at::Tensor>> gradient = assembler.Finish();
    if (!gradient.ok()) return gradient.status();
    result.gradient = *std::move(gradient);
  }
  absl::Status added = aggregator->Add(std::move(result));
  if (added.ok() && !evaluate_only) {
    v1::WorkerJobPlan job_plan;
    job_plan.set_job_id(deps_.record->job_id());
    *job_plan.mutable_plan() = planner::CandidateToProto(plan.candidate);
    job_plan.set_predicted_tokens_per_second(plan.tokens_per_second);
    if (summary->compute_seconds() > 0) {
      job_plan.set_measured_tokens_per_second(
          static_cast<double>(shard.sequences.size() * deps_.data->sequence_length()) / summary->compute_seconds());
    }
    job_plan.set_measured_peak_bytes(summary->measured_peak_bytes());
    deps_.registry->SetJobPlan(plan.worker.worker_id, job_plan);
  }
  return added;
}

void ShardDispatcher::CancelAll() {
  absl::MutexLock lock(&mutex_);
  for (auto& [context, worker] : in_flight_) context->TryCancel();
}

void ShardDispatcher::CancelCallsToGoneWorkers() {
  absl::MutexLock lock(&mutex_);
  for (auto& [context, worker] : in_flight_) {
    if (cancelled_gone_.count(context) == 0 && !deps_.registry->IsServing(worker.first, worker.second)) {
      cancelled_gone_.insert(context);
      context->TryCancel();
    }
  }
}

}  // namespace slimfit::server
