// ShardDispatcher: one ComputeGradient call and the cancellation of calls in flight.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "data_formats/token_codec.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "server/gradient_stream.h"
#include "server/shard_dispatcher.h"
#include "wire/tensor_chunks.h"

namespace slimfit::server {

// Room for one shard's gradient among those a job assembles at once (options.max_assembly_bytes):
// waits for it on construction, gives it back on destruction.
class ShardDispatcher::AssemblyRoom {
 public:
  AssemblyRoom(ShardDispatcher* dispatcher, int64_t bytes) : dispatcher_(dispatcher), bytes_(bytes) {
    const int64_t limit = dispatcher_->deps_.options.max_assembly_bytes;
    absl::MutexLock lock(&dispatcher_->assembly_mutex_);
    auto fits = [this, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(dispatcher_->assembly_mutex_) {
      return dispatcher_->assembly_bytes_ == 0 || dispatcher_->assembly_bytes_ + bytes_ <= limit;
    };
    dispatcher_->assembly_mutex_.Await(absl::Condition(&fits));
    dispatcher_->assembly_bytes_ += bytes_;
  }
  ~AssemblyRoom() {
    absl::MutexLock lock(&dispatcher_->assembly_mutex_);
    dispatcher_->assembly_bytes_ -= bytes_;
  }
  AssemblyRoom(const AssemblyRoom&) = delete;
  AssemblyRoom& operator=(const AssemblyRoom&) = delete;

 private:
  ShardDispatcher* const dispatcher_;
  const int64_t bytes_;
};

ShardDispatcher::CallOutcome ShardDispatcher::CallShard(const WorkerPlan& plan, const Task& task,
                                                        int64_t round, uint64_t version, int64_t normalizer,
                                                        bool evaluate_only, RoundCollector* collector) {
  CallOutcome outcome;
  v1::ComputeGradientRequest request;
  request.set_job_id(deps_.record->job_id());
  request.set_round(round);
  request.set_shard_id(task.id);
  request.set_attempt(task.attempt);
  request.set_parameter_version(version);
  *request.mutable_plan() = planner::PlanToProto(plan.candidate.plan);
  request.set_sequence_length(deps_.data->sequence_length());
  request.set_token_encoding(deps_.encoding);
  // Sequences of worker-local datasets travel as their place in the worker's dataset; the others as
  // tokens. A shard of one local dataset is that dataset's entry alone; a mixed one (a local-steps
  // share) says where each local sequence goes.
  std::map<int, v1::LocalDataShard*> entries;
  std::vector<SequenceRef> uploaded;
  const std::set<int> sources = LocalSourcesOf(task.sequences);
  const bool any_uploaded = std::any_of(task.sequences.begin(), task.sequences.end(),
                                        [](const SequenceRef& sequence) { return sequence.source == 0; });
  const bool positioned = sources.size() > 1 || (!sources.empty() && any_uploaded);
  for (size_t position = 0; position < task.sequences.size(); ++position) {
    const SequenceRef& sequence = task.sequences[position];
    const LocalSource* local = deps_.data->LocalSourceOf(sequence);
    if (local == nullptr) {
      uploaded.push_back(sequence);
      continue;
    }
    v1::LocalDataShard*& entry = entries[sequence.source];
    if (entry == nullptr) {
      entry = request.add_local_data();
      entry->set_sha256(local->sha256);
    }
    entry->add_sequences(sequence.begin / deps_.data->sequence_length());
    if (positioned) entry->add_positions(static_cast<int64_t>(position));
  }
  if (!uploaded.empty()) {
    std::vector<int64_t> tokens, doc_starts;
    deps_.data->Gather(uploaded, &tokens, &doc_starts);
    absl::StatusOr<std::string> encoded = rpc::EncodeTokens(tokens, deps_.encoding);
    if (!encoded.ok()) {
      outcome.status = encoded.status();
      return outcome;
    }
    request.set_tokens(*std::move(encoded));
    for (int64_t start : doc_starts) request.add_doc_starts(start);
  }
  for (const int index : deps_.gradient_tensors) request.add_gradient_tensors(index);
  request.set_loss_normalizer(normalizer);
  request.set_feature_seed(deps_.feature_seed);
  request.set_evaluate_only(evaluate_only);
  if (!task.sequences_per_step.empty()) {
    v1::LocalSteps* local = request.mutable_local_steps();
    for (int64_t count : task.sequences_per_step) local->add_sequences_per_step(count);
    *local->mutable_inner_optimizer() = deps_.inner_optimizer;
    if (performer::IsCompressed(deps_.pseudo_gradient_compression)) {
      local->set_compression(deps_.pseudo_gradient_compression);
    }
    if (deps_.round_time_budget_seconds > 0) local->set_time_budget_seconds(deps_.round_time_budget_seconds);
  }

  const double predicted = plan.candidate.prediction.seconds * static_cast<double>(task.sequences.size());
  // Under a round's time budget a worker is not waited for past 1.5 × the budget + 5 s (the
  // fetch and the stream on top of the steps it has time for).
  // A shard tried again (nothing of the round had arrived when it failed) gets the ordinary deadline.
  const absl::Duration deadline =
      !task.sequences_per_step.empty() && deps_.round_time_budget_seconds > 0 && task.attempt == 1
          ? absl::Seconds(1.5 * deps_.round_time_budget_seconds + 5)
          : deps_.options.shard_timeout + absl::Seconds(10 * predicted);
  auto context = rpc::MakeClientContext(plan.worker.call_token,
                                        std::chrono::milliseconds(absl::ToInt64Milliseconds(deadline)));
  {
    absl::MutexLock lock(&mutex_);
    in_flight_[context.get()] = {plan.worker.worker_id, plan.worker.incarnation};
    deadlines_[context.get()] = deps_.clock->Now() + deadline;
    if (stopping()) context->TryCancel();
  }
  struct Untrack {
    ShardDispatcher* dispatcher;
    grpc::ClientContext* context;
    ~Untrack() {
      absl::MutexLock lock(&dispatcher->mutex_);
      dispatcher->in_flight_.erase(context);
      dispatcher->cancelled_.erase(context);
      dispatcher->deadlines_.erase(context);
    }
  } untrack{this, context.get()};

  // A shard's tensors are allocated when its first chunk arrives and freed once counted; the job
  // assembles at most options.max_assembly_bytes of them at once (workers that finish meanwhile
  // wait in gRPC's flow control), so a large model's shards do not each hold a copy of the model.
  // Declared before the assembler, so that the room is given back after its tensors are freed.
  // A shard streamed into the sum holds nothing: its chunks are summed as they arrive (and the
  // sum is tainted, the round computed again, when it then fails: RoundCollector::StreamedShard).
  std::optional<AssemblyRoom> room;
  std::optional<RoundCollector::StreamedShard> streamed;
  if (task.stream_into_sum) streamed.emplace(collector, plan.worker.worker_id, task.id);
  std::vector<performer::TensorSpec> specs;
  for (const size_t i : SentTensors()) specs.push_back({deps_.names[i], deps_.shapes[i]});
  const std::string stream_name =
      absl::StrCat("gradient of round ", round, " shard ", task.id, " from ", plan.worker.worker_id);
  performer::TensorAssembler assembler =
      streamed.has_value()
          ? performer::TensorAssembler(std::move(specs), deps_.dtype, stream_name,
                                       request.local_steps().compression(),
                                       [&streamed](size_t tensor, int64_t first, const at::Tensor& values) {
                                         return streamed->Add(tensor, first, values);
                                       })
          : performer::TensorAssembler(std::move(specs), deps_.dtype, stream_name,
                                       request.local_steps().compression());
  // A spot-checked shard's result waits whole for the other opinion (and a tiebreak): where the
  // coordinator offloads, it waits in files, resident only while it arrives and is compared, screened
  // and summed, a tensor at a time — so it takes no assembly room either.
  const bool in_files = !streamed.has_value() && !evaluate_only && !deps_.options.offload_directory.empty() &&
                        collector->IsChecked(task.id);
  if (in_files) assembler.AllocateInFiles(deps_.options.offload_directory);
  std::unique_ptr<grpc::ClientReaderInterface<v1::ComputeGradientResponse>> reader =
      plan.worker.stub->ComputeGradient(context.get(), request);
  GradientStream stream = ReadGradientStream(reader.get(), context.get(), &assembler, evaluate_only, [&] {
    // A round under a time budget does not queue its
    // results: waiting would count against its deadline.
    if (!streamed.has_value() && !in_files &&
        (task.sequences_per_step.empty() || deps_.round_time_budget_seconds <= 0)) {
      room.emplace(this, ShardGradientBytes());
    }
  });
  outcome.bytes_received += stream.bytes;
  const absl::Status& stream_error = stream.error;
  const std::optional<v1::GradientSummary>& summary = stream.summary;
  grpc::Status finished = reader->Finish();
  {
    // A worker no longer serving (lost, left, revoked) counts for nothing: its call was cancelled.
    absl::MutexLock lock(&mutex_);
    const auto cancelled = cancelled_.find(context.get());
    if (cancelled != cancelled_.end() && cancelled->second == Cancelled::kWorkerGone) {
      outcome.status = absl::UnavailableError(
          absl::StrCat("worker ", plan.worker.worker_id, " stopped heartbeating; its call was cancelled"));
      outcome.gone = true;
      return outcome;
    }
    if (cancelled != cancelled_.end() && cancelled->second == Cancelled::kDeadline &&
        !(stream.error.ok() && stream.summary.has_value())) {
      // Values of a shard streamed into the sum taint it, as any failure midway does.
      outcome.status = absl::DeadlineExceededError(absl::StrCat(
          "worker ", plan.worker.worker_id, " did not answer within ", absl::FormatDuration(deadline)));
      return outcome;
    }
    // Cancelled for a tainted round before it ended on its own (a whole result, or the worker's
    // protocol error, are handled as ever). Values of it may be in the sum, which is thrown away
    // anyway: no blame for the taint.
    if (cancelled != cancelled_.end() && cancelled->second == Cancelled::kRoundTainted &&
        !(stream.error.ok() && stream.summary.has_value()) &&
        stream.error.code() != absl::StatusCode::kInvalidArgument) {
      if (streamed.has_value()) streamed->Abandon();
      outcome.status =
          absl::AbortedError(absl::StrCat("the round's sum was tainted by another shard; the call to ",
                                          plan.worker.worker_id, " was cancelled"));
      outcome.abandoned = true;
      return outcome;
    }
  }
  // The stream delivered its summary (the last message) without a protocol error: a call that then
  // ends badly — the connection lost at the last moment — does not undo the result, which is
  // checked below like any other (every tensor complete, the summary, the values). Counting it
  // spares the shard's recomputation, and a streamed shard's round.
  const bool arrived = stream_error.ok() && summary.has_value();
  // From here on, anything wrong with what came back is the worker's doing.
  auto misbehaved = [&](absl::Status status) {
    outcome.status = std::move(status);
    outcome.misbehaved = true;
    return outcome;
  };
  if (!stream_error.ok()) {
    // A protocol error is the worker's; a sink's other refusals (a shard dropped or counted
    // meanwhile) are not.
    if (stream_error.code() == absl::StatusCode::kInvalidArgument) return misbehaved(stream_error);
    outcome.status = stream_error;
    return outcome;
  }
  if (!finished.ok() && !arrived) {
    outcome.status =
        rpc::FromGrpcStatus(finished, absl::StrCat("worker ", plan.worker.worker_id), context.get());
    return outcome;
  }
  if (!summary.has_value()) return misbehaved(absl::InvalidArgumentError("stream ended without a summary"));
  if (summary->job_id() != deps_.record->job_id() || summary->shard_id() != task.id ||
      summary->attempt() != task.attempt) {
    return misbehaved(absl::InvalidArgumentError("summary does not echo the request"));
  }
  outcome.peak = summary->measured_peak_bytes();
  outcome.fetch_seconds = summary->fetch_seconds();
  outcome.compute_seconds = summary->compute_seconds();
  outcome.stream_seconds = summary->stream_seconds();
  outcome.inner_steps = summary->local_steps();
  ShardResult result;
  result.summary = *summary;
  if (!assembler.file_error().ok()) {
    base::LogWarning(deps_.record->job_id(), ": ", stream_name,
                     ": held in memory, not in --offload_dir: ", assembler.file_error().message());
  }
  if (!evaluate_only) {
    absl::StatusOr<std::vector<at::Tensor>> gradient = assembler.Finish();
    if (!gradient.ok()) return misbehaved(gradient.status());
    result.gradient = *std::move(gradient);
  }
  if (!finished.ok()) {
    const absl::Status ended = rpc::FromGrpcStatus(finished, "the call", context.get());
    base::LogWarning(deps_.record->job_id(), ": ", stream_name, ": the call ended ",
                     absl::StatusCodeToString(ended.code()), " (", ended.message(),
                     ") after the whole result arrived; the result counts");
  }
  outcome.status = streamed.has_value() ? streamed->Finish(result.summary)
                                        : collector->Accept(plan.worker.worker_id, std::move(result));
  if (outcome.status.code() == absl::StatusCode::kInvalidArgument) outcome.misbehaved = true;
  if (outcome.status.ok() && !evaluate_only) {
    v1::WorkerJobPlan job_plan;
    job_plan.set_job_id(deps_.record->job_id());
    *job_plan.mutable_plan() = planner::CandidateToProto(plan.candidate);
    job_plan.set_predicted_tokens_per_second(plan.tokens_per_second);
    if (summary->compute_seconds() > 0) {
      job_plan.set_measured_tokens_per_second(
          static_cast<double>(task.sequences.size() * deps_.data->sequence_length()) /
          summary->compute_seconds());
    }
    job_plan.set_measured_peak_bytes(summary->measured_peak_bytes());
    deps_.registry->SetJobPlan(plan.worker.worker_id, job_plan);
  }
  return outcome;
}

void ShardDispatcher::CancelAll() {
  absl::MutexLock lock(&mutex_);
  for (auto& [context, worker] : in_flight_) context->TryCancel();
}

void ShardDispatcher::CancelCallsOfATaintedRound() {
  absl::MutexLock lock(&mutex_);
  for (auto& [context, worker] : in_flight_) {
    if (cancelled_.emplace(context, Cancelled::kRoundTainted).second) context->TryCancel();
  }
}

void ShardDispatcher::CancelCallsToGoneWorkers() {
  absl::MutexLock lock(&mutex_);
  for (auto& [context, worker] : in_flight_) {
    const auto cancelled = cancelled_.find(context);
    if ((cancelled == cancelled_.end() || cancelled->second != Cancelled::kWorkerGone) &&
        !deps_.registry->IsServing(worker.first, worker.second)) {
      cancelled_[context] = Cancelled::kWorkerGone;
      context->TryCancel();
    }
  }
  const absl::Time now = deps_.clock->Now();
  for (const auto& [context, deadline] : deadlines_) {
    if (now >= deadline && cancelled_.emplace(context, Cancelled::kDeadline).second) context->TryCancel();
  }
}

}  // namespace slimfit::server
