#include "worker/worker_service.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "data_formats/token_codec.h"
#include "performer/gradient_engine.h"
#include "performer/memory_tracker.h"
#include "planner/bptt_schedule.h"
#include "planner/device_profile_io.h"
#include "planner/plan_proto.h"
#include "planner/plan_search.h"
#include "rpc/rpc_util.h"
#include "wire/engine_settings.h"
#include "wire/tensor_chunks.h"
#include "worker/plan_request.h"
#include "worker/shard_request.h"

namespace slimfit::worker {
namespace {

using planner::HumanBytes;

google::protobuf::Timestamp ToTimestamp(absl::Time time) {
  google::protobuf::Timestamp timestamp;
  const int64_t seconds = absl::ToUnixSeconds(time);
  timestamp.set_seconds(seconds);
  timestamp.set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(time - absl::FromUnixSeconds(seconds))));
  return timestamp;
}

std::string ShardName(const v1::ComputeGradientRequest& request) {
  return absl::StrCat("job ", request.job_id(), " round ", request.round(), " shard ", request.shard_id(),
                      " attempt ", request.attempt());
}

}  // namespace

WorkerService::WorkerService(Options options)
    : options_(std::move(options)), local_steps_(options_.local_steps_dir) {}

grpc::Status WorkerService::Authenticate(const grpc::ServerContext& context, bool coordinator_only) const {
  std::optional<std::string> token = rpc::BearerToken(context);
  if (!token.has_value()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing token: send metadata \"authorization: Bearer <token>\"");
  }
  const bool accepted = coordinator_only ? options_.identity->AcceptsCoordinator(*token)
                                         : options_.identity->AcceptsOperator(*token);
  if (!accepted) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        coordinator_only ? "not this worker's coordinator (unknown coordinator token)"
                                         : "unknown token: present the worker's join token");
  }
  return grpc::Status::OK;
}

void WorkerService::SetWorkerId(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  worker_id_ = worker_id;
}

std::string WorkerService::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

std::string WorkerService::WorkerNameLocked() const {
  return worker_id_.empty() ? std::string("(unregistered)") : worker_id_;
}

std::string WorkerService::WorkerName() const {
  absl::MutexLock lock(&mu_);
  return WorkerNameLocked();
}

void WorkerService::RecordPeak(int64_t peak_bytes) {
  absl::MutexLock lock(&mu_);
  peak_since_heartbeat_ = std::max(peak_since_heartbeat_, peak_bytes);
}

WorkerService::HeartbeatState WorkerService::TakeHeartbeatState() {
  absl::MutexLock lock(&mu_);
  HeartbeatState state;
  state.state = draining_ ? v1::WORKER_STATE_DRAINING
                          : (current_.has_value() ? v1::WORKER_STATE_BUSY : v1::WORKER_STATE_IDLE);
  state.current_work = current_;
  state.measured_peak_bytes = peak_since_heartbeat_;
  peak_since_heartbeat_ = 0;
  return state;
}

void WorkerService::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool WorkerService::WaitUntilIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !current_.has_value(); };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void WorkerService::CancelCurrentShard() { abandon_.store(true); }

absl::StatusOr<Shard> WorkerService::CutRequestShard(const v1::ComputeGradientRequest& request,
                                                     int64_t vocab) {
  if (request.local_data_size() > 0 && options_.local_data == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", WorkerName(), " holds no datasets of its own (started without --data)"));
  }
  std::vector<Shard> local;
  for (const v1::LocalDataShard& entry : request.local_data()) {
    absl::StatusOr<LocalDataReader::Sequences> read =
        options_.local_data->Read(entry, request.sequence_length());
    if (!read.ok()) return read.status();
    absl::StatusOr<Shard> cut =
        CutLocalShard(read->tokens, read->doc_starts, request.sequence_length(), vocab);
    if (!cut.ok()) return cut.status();
    local.push_back(*std::move(cut));
  }
  return AssembleShard(request, vocab, std::move(local));
}

grpc::Status WorkerService::DescribeLocalData(grpc::ServerContext* context,
                                              const v1::DescribeLocalDataRequest* request,
                                              v1::LocalDataLayout* response) {
  if (grpc::Status s = Authenticate(*context, /*coordinator_only=*/true); !s.ok()) return s;
  if (options_.local_data == nullptr) {
    return rpc::ToGrpcStatus(absl::FailedPreconditionError(
        absl::StrCat("worker ", WorkerName(), " holds no datasets of its own (started without --data)")));
  }
  absl::StatusOr<v1::LocalDataLayout> layout = options_.local_data->Describe(*request);
  if (!layout.ok()) return rpc::ToGrpcStatus(layout.status(), context);
  *response = *std::move(layout);
  return grpc::Status::OK;
}

grpc::Status WorkerService::ComputeGradient(grpc::ServerContext* context,
                                            const v1::ComputeGradientRequest* request,
                                            grpc::ServerWriter<v1::ComputeGradientResponse>* writer) {
  const absl::Time started = absl::Now();
  if (grpc::Status s = Authenticate(*context, /*coordinator_only=*/true); !s.ok()) return s;
  absl::StatusOr<performer::Plan> plan = ValidateShardRequest(*request);
  if (!plan.ok()) {
    base::LogWarning(ShardName(*request), ": refused: ", plan.status().message());
    return rpc::ToGrpcStatus(plan.status(), context);
  }
  {
    absl::MutexLock lock(&mu_);
    if (draining_) {
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("worker ", WorkerNameLocked(), " is draining (shutting down): try another worker"));
    }
    if (current_.has_value()) {
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("worker ", WorkerNameLocked(), " is busy with job ", current_->job_id(), " round ",
                       current_->round(), " shard ", current_->shard_id(), ": try another worker"));
    }
    v1::CurrentWork work;
    work.set_job_id(request->job_id());
    work.set_round(request->round());
    work.set_shard_id(request->shard_id());
    work.set_attempt(request->attempt());
    work.set_parameter_version(request->parameter_version());
    int64_t tokens =
        static_cast<int64_t>(request->tokens().size()) / rpc::TokenWidth(request->token_encoding());
    for (const v1::LocalDataShard& local : request->local_data()) {
      tokens += local.sequences_size() * request->sequence_length();
    }
    work.set_tokens(tokens);
    *work.mutable_started_at() = ToTimestamp(started);
    current_ = std::move(work);
    abandon_.store(false);
  }
  absl::Status status;
  // On the worker's shard thread (this handler waits): its fetch, compute and stream allocate from
  // that thread's heap, shard after shard.
  shard_thread_.Run([&] {
    try {
      // The worker's --threads bound every plan: 0 (or more) means the worker's own setting, and
      // the engine's process-wide thread count is set back to it for every shard.
      performer::Plan bounded = *plan;
      if (bounded.threads <= 0 || bounded.threads > options_.threads) bounded.threads = options_.threads;
      status = RunShard(context, *request, bounded, started, writer);
    } catch (const std::exception& e) {
      // Whatever escapes the engine or LibTorch must not leave the worker busy for good.
      status = absl::InternalError(absl::StrCat(ShardName(*request), ": ", e.what()));
    }
  });
  {
    absl::MutexLock lock(&mu_);
    current_.reset();
  }
  if (!status.ok())
    base::LogWarning(ShardName(*request), ": ", absl::StatusCodeToString(status.code()), ": ",
                     status.message());
  return rpc::ToGrpcStatus(status, context);
}

absl::Status WorkerService::RunShard(grpc::ServerContext* context, const v1::ComputeGradientRequest& request,
                                     const performer::Plan& plan, absl::Time started,
                                     grpc::ServerWriter<v1::ComputeGradientResponse>* writer) {
  const std::string worker = WorkerName();
  auto stopped = [&]() -> std::optional<absl::Status> {
    if (abandon_.load()) {
      return absl::CancelledError(
          absl::StrCat("worker ", worker, " abandoned ", ShardName(request), ": shutting down"));
    }
    if (context->IsCancelled()) {
      return absl::CancelledError(
          absl::StrCat(ShardName(request), ": the caller cancelled; partial work discarded"));
    }
    return std::nullopt;
  };

  const absl::Time fetch_started = absl::Now();
  absl::StatusOr<std::shared_ptr<const performer::PerformerModel>> model = options_.cache->Get(
      request.job_id(), request.parameter_version(), plan.dtype, rpc::CallDeadline(*context));
  if (!model.ok()) return model.status();
  // The parameters' fetch from the coordinator, or nothing when this version is cached already.
  const double fetch_seconds = absl::ToDoubleSeconds(absl::Now() - fetch_started);
  if (auto s = stopped()) return *s;
  const performer::PerformerModel& parameters = **model;

  for (const int index : request.gradient_tensors()) {
    if (static_cast<size_t>(index) >= parameters.names().size()) {
      return InvalidField("gradient_tensors", absl::StrCat(index, " is not below the model's ",
                                                           parameters.names().size(), " parameters"));
    }
  }
  absl::StatusOr<Shard> shard = CutRequestShard(request, parameters.config().vocab);
  if (!shard.ok()) return shard.status();
  const bool want_gradient = !request.evaluate_only();
  const int64_t extra_bytes = request.has_local_steps()
                                  ? performer::LocalStepsExtraBytes(
                                        wire::OptimizerSettingsOf(request.local_steps().inner_optimizer()),
                                        parameters.parameter_bytes(),
                                        wire::TensorEncodingFromProto(request.local_steps().compression()))
                                  : 0;
  absl::StatusOr<BudgetCheck> budget =
      CheckBudget(parameters.config(), plan, request.sequence_length(), *shard, want_gradient,
                  options_.memory_budget_bytes, options_.profile, worker, extra_bytes);
  if (!budget.ok()) return budget.status();
  // Other jobs' cached parameters share the memory the budget covers: drop them when the shard
  // needs their room (they are fetched again when their job's next shard comes).
  if (budget->needed_bytes + options_.cache->BytesOfOtherJobs(request.job_id()) > budget->usable_bytes) {
    options_.cache->DropOtherJobs(request.job_id());
  }

  performer::GradientOptions gradient_options;
  gradient_options.feature_seed = request.feature_seed();
  gradient_options.dp_schedule = planner::ScheduleForPlan;
  gradient_options.slice_replay =
      options_.cuda_graphs ? performer::SliceReplay::kAuto : performer::SliceReplay::kOff;
  const size_t count = shard->sequences.size();
  // The engine over sequences [begin, end) at `model`, gradients summed in place.
  const SumGradients sum_sequences = [&](const performer::PerformerModel& model, size_t begin, size_t end,
                                         int64_t normalizer) -> absl::StatusOr<SequenceSum> {
    performer::GradientOptions options = gradient_options;
    options.loss_normalizer = normalizer;
    SequenceSum total;
    for (size_t i = begin; i < end; ++i) {
      if (auto s = stopped()) return *s;
      const performer::PackedBatch& batch = shard->sequences[i];
      // A sequence whose documents are all one token long predicts nothing: its loss and gradient
      // are zero (the engine has no loss to differentiate there).
      if (performer::PredictedTokenCount(batch) == 0) continue;
      const performer::Plan sequence_plan = PlanForSequence(plan, batch.size());
      absl::StatusOr<performer::GradientResult> result =
          performer::ComputeGradient(model, batch, sequence_plan, options);
      const std::string where = absl::StrCat(ShardName(request), ", sequence ", i + 1, " of ", count);
      if (!result.ok()) {
        if (absl::IsResourceExhausted(result.status())) {
          absl::StatusOr<performer::MemoryStats> stats = performer::GetMemoryStats(model.device());
          const int64_t peak = stats.ok() ? stats->peak_bytes : 0;
          v1::ErrorDetail detail;
          detail.set_required_bytes(peak);
          detail.set_budget_bytes(options_.memory_budget_bytes);
          detail.set_usable_bytes(budget->usable_bytes);
          return rpc::AttachErrorDetail(
              absl::ResourceExhaustedError(absl::StrFormat(
                  "worker %s ran out of memory on %s: measured peak %s (predicted %s) with a budget of %s: "
                  "%s",
                  worker, where, HumanBytes(static_cast<double>(peak)),
                  HumanBytes(static_cast<double>(budget->needed_bytes)),
                  HumanBytes(static_cast<double>(options_.memory_budget_bytes)), result.status().message())),
              detail);
        }
        return absl::InternalError(absl::StrCat(where, " with plan {", sequence_plan.DebugString(),
                                                "}: ", result.status().message()));
      }
      try {
        if (want_gradient) {
          if (total.gradient.empty()) {
            total.gradient = std::move(result->gradients);
          } else {
            for (size_t t = 0; t < total.gradient.size(); ++t) total.gradient[t].add_(result->gradients[t]);
          }
        }
      } catch (const c10::Error& e) {
        return absl::InternalError(
            absl::StrCat(where, ": adding the gradient failed: ", e.what_without_backtrace()));
      }
      result->gradients.clear();
      total.loss_sum += result->loss_sum;
      total.token_count += result->token_count;
      total.slice_forwards += result->slice_forwards;
      total.compute_seconds += result->seconds;
      total.peak_bytes = std::max(total.peak_bytes, result->peak_bytes);
      RecordPeak(result->peak_bytes);
    }
    return total;
  };

  SequenceSum total;
  std::vector<performer::EncodedTensor> encoded;  // a compressed pseudo-gradient
  v1::GradientSummary summary;
  if (request.has_local_steps()) {
    std::vector<int64_t> predicted;
    for (const performer::PackedBatch& batch : shard->sequences)
      predicted.push_back(performer::PredictedTokenCount(batch));
    const absl::Time deadline = request.local_steps().has_time_budget_seconds()
                                    ? started + absl::Seconds(request.local_steps().time_budget_seconds())
                                    : absl::InfiniteFuture();
    absl::StatusOr<LocalStepsResult> local =
        local_steps_.Run(request.job_id(), parameters, request.local_steps(), predicted,
                         request.loss_normalizer(), sum_sequences, deadline);
    if (!local.ok()) return local.status();
    total = std::move(local->sum);
    encoded = std::move(local->encoded);
    summary.set_local_steps(local->steps);
    summary.set_inner_steps_total(local->inner_steps_total);
  } else {
    absl::StatusOr<SequenceSum> sum = sum_sequences(parameters, 0, count, request.loss_normalizer());
    if (!sum.ok()) return sum.status();
    total = *std::move(sum);
  }
  std::vector<at::Tensor>& sum = total.gradient;
  summary.set_loss_sum(total.loss_sum);
  summary.set_token_count(total.token_count);
  summary.set_slice_forwards(total.slice_forwards);
  const double compute_seconds = total.compute_seconds;
  const int64_t measured_peak = total.peak_bytes;
  if (auto s = stopped()) return *s;

  int64_t gradient_bytes = 0;
  int gradient_tensors = 0;
  const absl::Time stream_started = absl::Now();
  if (want_gradient) {
    if (sum.empty()) {  // no sequence predicted anything: the gradient is zero
      try {
        for (const at::Tensor& p : parameters.parameters()) sum.push_back(at::zeros_like(p));
      } catch (const c10::Error& e) {
        return absl::InternalError(absl::StrCat(ShardName(request), ": ", e.what_without_backtrace()));
      }
    }
    auto emit = [&](const v1::TensorChunk& chunk) {
      if (chunk.offset() == 0) ++gradient_tensors;
      gradient_bytes += performer::ChunkWireBytes(chunk);
      v1::ComputeGradientResponse response;
      *response.mutable_chunk() = chunk;
      return writer->Write(response);
    };
    // Only the trainable parameters' gradients, when the job trains a subset.
    std::vector<std::string> names = parameters.names();
    if (request.gradient_tensors_size() > 0) {
      std::vector<std::string> sent_names;
      std::vector<at::Tensor> sent;
      for (const int index : request.gradient_tensors()) {  // checked against the model above
        sent_names.push_back(names[static_cast<size_t>(index)]);
        sent.push_back(std::move(sum[static_cast<size_t>(index)]));
      }
      names = std::move(sent_names);
      sum = std::move(sent);
    }
    absl::Status streamed = encoded.empty() ? performer::ChunkTensors(names, sum, plan.dtype, emit)
                                            : performer::ChunkEncoded(names, encoded, plan.dtype, emit);
    if (absl::IsCancelled(streamed)) {
      return absl::CancelledError(
          absl::StrCat(ShardName(request), ": the caller went away while the gradient streamed"));
    }
    if (!streamed.ok())
      return absl::InternalError(absl::StrCat(ShardName(request), ": ", streamed.message()));
  }

  summary.set_job_id(request.job_id());
  summary.set_round(request.round());
  summary.set_shard_id(request.shard_id());
  summary.set_attempt(request.attempt());
  summary.set_parameter_version(request.parameter_version());
  summary.set_measured_peak_bytes(measured_peak);
  summary.set_predicted_peak_bytes(budget->needed_bytes);
  summary.set_compute_seconds(compute_seconds);
  summary.set_fetch_seconds(fetch_seconds);
  // Chunking and writing the gradient: the writes block while the transport's window is full.
  summary.set_stream_seconds(absl::ToDoubleSeconds(absl::Now() - stream_started));
  summary.set_gradient_tensors(gradient_tensors);
  summary.set_gradient_bytes(gradient_bytes);
  summary.set_sequences(static_cast<int32_t>(count));
  summary.set_total_seconds(absl::ToDoubleSeconds(absl::Now() - started));
  v1::ComputeGradientResponse response;
  *response.mutable_summary() = summary;
  if (!writer->Write(response)) {
    return absl::CancelledError(
        absl::StrCat(ShardName(request), ": the caller went away before the summary"));
  }
  base::LogInfo(ShardName(request), ": ", count, " sequence", count == 1 ? "" : "s", ", ",
                summary.token_count(), " predicted tokens, loss ",
                absl::StrFormat("%.4f", summary.loss_sum() / std::max<int64_t>(1, summary.token_count())),
                ", peak ", HumanBytes(static_cast<double>(measured_peak)), " (predicted ",
                HumanBytes(static_cast<double>(budget->needed_bytes)), "), ",
                absl::StrFormat("%.2f s", summary.total_seconds()),
                request.evaluate_only() ? ", evaluation" : "");
  return absl::OkStatus();
}

grpc::Status WorkerService::GetProfile(grpc::ServerContext* context, const v1::GetProfileRequest*,
                                       v1::GetProfileResponse* response) {
  if (grpc::Status s = Authenticate(*context, /*coordinator_only=*/false); !s.ok()) return s;
  response->set_worker_id(worker_id());
  *response->mutable_profile() = planner::DeviceProfileToProto(options_.profile);
  response->set_memory_budget_bytes(options_.memory_budget_bytes);
  response->set_device(options_.device);
  response->set_threads(options_.threads);
  response->set_version(kWorkerVersion);
  if (options_.calibrated_at != absl::InfinitePast()) {
    *response->mutable_calibrated_at() = ToTimestamp(options_.calibrated_at);
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::Plan(grpc::ServerContext* context, const v1::PlanRequest* request,
                                 v1::MemoryPlan* response) {
  if (grpc::Status s = Authenticate(*context, /*coordinator_only=*/false); !s.ok()) return s;
  absl::StatusOr<planner::PlanSearchRequest> search =
      ValidatePlanRequest(*request, options_.memory_budget_bytes);
  if (!search.ok()) return rpc::ToGrpcStatus(search.status(), context);
  const bool include_frontier = request->has_include_frontier() ? request->include_frontier() : true;
  absl::StatusOr<v1::MemoryPlan> plan =
      planner::SearchMemoryPlan(*search, options_.profile, include_frontier);
  if (!plan.ok()) {
    const absl::Status status =
        absl::IsInvalidArgument(plan.status())
            ? plan.status()
            : absl::InternalError(absl::StrCat("plan search: ", plan.status().message()));
    return rpc::ToGrpcStatus(status, context);
  }
  *response = *std::move(plan);
  response->set_worker_id(worker_id());
  return grpc::Status::OK;
}

}  // namespace slimfit::worker
