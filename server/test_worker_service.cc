#include "server/test_worker_service.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data_formats/token_codec.h"
#include "performer/gradient_engine.h"
#include "performer/packed_batch.h"
#include "rpc/rpc_util.h"
#include "wire/tensor_chunks.h"

namespace slimfit::server {

TestWorkerService::~TestWorkerService() { EndHangingCalls(); }

void TestWorkerService::EndHangingCalls() {
  absl::MutexLock lock(&mutex_);
  shutting_down_ = true;
}

void TestWorkerService::SetBehaviour(Behaviour behaviour, int calls) {
  absl::MutexLock lock(&mutex_);
  behaviour_ = behaviour;
  behaviour_calls_ = calls;
}

int TestWorkerService::calls() const {
  absl::MutexLock lock(&mutex_);
  return calls_;
}

int TestWorkerService::finished() const {
  absl::MutexLock lock(&mutex_);
  return finished_;
}

bool TestWorkerService::AwaitCalls(int count, absl::Duration real_timeout) const {
  absl::MutexLock lock(&mutex_);
  auto arrived = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return calls_ >= count; };
  return mutex_.AwaitWithTimeout(absl::Condition(&arrived), real_timeout);
}

TestWorkerService::Behaviour TestWorkerService::Next() {
  absl::MutexLock lock(&mutex_);
  ++calls_;
  if (behaviour_calls_ == 0) return Behaviour::kHonest;
  if (behaviour_calls_ > 0) --behaviour_calls_;
  return behaviour_;
}

grpc::Status TestWorkerService::ComputeGradient(grpc::ServerContext* context,
                                                const v1::ComputeGradientRequest* request,
                                                grpc::ServerWriter<v1::ComputeGradientResponse>* writer) {
  const Behaviour behaviour = Next();
  absl::Status status;
  switch (behaviour) {
    case Behaviour::kUnavailable:
      status = absl::UnavailableError("busy with another shard");
      break;
    case Behaviour::kFails:
      status = absl::InternalError("the engine failed on this worker");
      break;
    case Behaviour::kHangs: {
      // No answer: only the caller's cancellation (or the fleet's shutdown) ends the call. gRPC's
      // synchronous API offers no wake-up on cancellation, so it is looked at every few ms.
      absl::MutexLock lock(&mutex_);
      while (!shutting_down_ && !context->IsCancelled()) {
        mutex_.AwaitWithTimeout(absl::Condition(&shutting_down_), absl::Milliseconds(5));
      }
      status = absl::CancelledError("the call was cancelled");
      break;
    }
    default:
      status = Answer(*request, behaviour, writer);
  }
  absl::MutexLock lock(&mutex_);
  ++finished_;
  return rpc::ToGrpcStatus(status);
}

absl::Status TestWorkerService::Answer(const v1::ComputeGradientRequest& request, Behaviour behaviour,
                                       grpc::ServerWriter<v1::ComputeGradientResponse>* writer) const {
  if (request.has_local_steps()) return absl::UnimplementedError("local steps: not in the test worker");
  absl::StatusOr<std::shared_ptr<const performer::PerformerModel>> model =
      parameters_(request.job_id(), request.parameter_version());
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<int64_t>> tokens =
      rpc::DecodeTokens(request.tokens(), request.token_encoding(), (*model)->config().vocab, "tokens");
  if (!tokens.ok()) return tokens.status();
  const int64_t length = request.sequence_length();
  if (length <= 0) return absl::InvalidArgumentError("sequence_length: must be positive");

  performer::GradientOptions options;
  options.loss_normalizer = request.loss_normalizer();
  options.feature_seed = request.feature_seed();
  std::vector<at::Tensor> gradient;
  double loss_sum = 0;
  int64_t token_count = 0, peak = 0, sequences = 0;
  const int64_t size = static_cast<int64_t>(tokens->size());
  for (int64_t begin = 0; begin < size; begin += length) {
    const int64_t end = std::min(size, begin + length);
    performer::PackedBatch batch;
    batch.tokens.assign(tokens->begin() + begin, tokens->begin() + end);
    batch.doc_starts.push_back(0);
    for (const int64_t start : request.doc_starts()) {
      if (start > begin && start < end) batch.doc_starts.push_back(start - begin);
    }
    ++sequences;
    if (performer::PredictedTokenCount(batch) == 0) continue;
    absl::StatusOr<performer::GradientResult> result =
        performer::ComputeGradient(**model, batch, performer::Plan(), options);
    if (!result.ok()) return result.status();
    if (gradient.empty()) {
      gradient = std::move(result->gradients);
    } else {
      for (size_t i = 0; i < gradient.size(); ++i) gradient[i].add_(result->gradients[i]);
    }
    loss_sum += result->loss_sum;
    token_count += result->token_count;
    peak = std::max(peak, result->peak_bytes);
  }

  v1::GradientSummary summary;
  summary.set_job_id(request.job_id());
  summary.set_round(request.round());
  summary.set_shard_id(request.shard_id());
  summary.set_attempt(behaviour == Behaviour::kMalformed ? request.attempt() + 1 : request.attempt());
  summary.set_parameter_version(request.parameter_version());
  summary.set_loss_sum(loss_sum);
  summary.set_token_count(token_count);
  summary.set_measured_peak_bytes(std::max<int64_t>(peak, 1));
  summary.set_predicted_peak_bytes(std::max<int64_t>(peak, 1));
  summary.set_sequences(static_cast<int32_t>(sequences));
  if (!request.evaluate_only()) {
    if (gradient.empty()) {
      for (const at::Tensor& parameter : (*model)->parameters())
        gradient.push_back(at::zeros_like(parameter));
    }
    std::vector<std::string> names;
    std::vector<at::Tensor> sent;
    if (request.gradient_tensors().empty()) {
      names = (*model)->names();
      sent = gradient;
    } else {
      for (const int index : request.gradient_tensors()) {
        names.push_back((*model)->names()[static_cast<size_t>(index)]);
        sent.push_back(gradient[static_cast<size_t>(index)]);
      }
    }
    if (behaviour == Behaviour::kLies) {
      for (at::Tensor& tensor : sent) tensor = tensor * 1.5;
    }
    int64_t bytes = 0;
    absl::Status streamed =
        performer::ChunkTensors(names, sent, (*model)->dtype(), [&](const v1::TensorChunk& chunk) {
          v1::ComputeGradientResponse response;
          *response.mutable_chunk() = chunk;
          bytes += performer::ChunkWireBytes(chunk);
          return writer->Write(response);
        });
    if (!streamed.ok()) return streamed;
    summary.set_gradient_tensors(static_cast<int32_t>(sent.size()));
    summary.set_gradient_bytes(bytes);
  }
  v1::ComputeGradientResponse last;
  *last.mutable_summary() = summary;
  if (!writer->Write(last)) return absl::CancelledError("the coordinator went away");
  return absl::OkStatus();
}

TestWorkerFleet::~TestWorkerFleet() {
  absl::MutexLock lock(&mutex_);
  for (auto& [address, served] : workers_) {
    served.service->EndHangingCalls();
    served.server->Shutdown(std::chrono::system_clock::now());
  }
}

TestWorkerService* TestWorkerFleet::Add(const std::string& address, TestParameterSource parameters) {
  Served served;
  served.service = std::make_unique<TestWorkerService>(std::move(parameters));
  grpc::ServerBuilder builder;
  builder.RegisterService(served.service.get());
  served.server = builder.BuildAndStart();
  TestWorkerService* service = served.service.get();
  absl::MutexLock lock(&mutex_);
  workers_[address] = std::move(served);
  return service;
}

WorkerStubFactory TestWorkerFleet::StubFactory() {
  return [this](const std::string& address) -> absl::StatusOr<std::shared_ptr<v1::Worker::StubInterface>> {
    absl::MutexLock lock(&mutex_);
    auto it = workers_.find(address);
    if (it == workers_.end()) return absl::InvalidArgumentError(absl::StrCat("no test worker at ", address));
    return std::shared_ptr<v1::Worker::StubInterface>(
        v1::Worker::NewStub(it->second.server->InProcessChannel(grpc::ChannelArguments())));
  };
}

}  // namespace slimfit::server
