#include "worker/test_coordinator.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/secrets.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "wire/tensor_chunks.h"

namespace slimfit::worker {

void TestCoordinator::Publish(const std::string& job_id, uint64_t version,
                              const performer::PerformerModel& model, uint64_t feature_seed) {
  Published published;
  published.version = version;
  v1::ParameterManifest& manifest = published.manifest;
  manifest.set_job_id(job_id);
  manifest.set_parameter_version(version);
  *manifest.mutable_config() = planner::ModelConfigToProto(model.config());
  manifest.set_dtype(planner::DTypeToProto(model.dtype()));
  manifest.set_feature_seed(feature_seed);
  int64_t total = 0;
  for (size_t i = 0; i < model.names().size(); ++i) {
    const at::Tensor& p = model.parameters()[i];
    *manifest.add_tensors() = performer::ToTensorInfo(
        {model.names()[i], std::vector<int64_t>(p.sizes().begin(), p.sizes().end())}, model.dtype());
    total += manifest.tensors(static_cast<int>(i)).bytes();
    published.names.push_back(model.names()[i]);
    published.tensors.push_back(p.detach().to(at::kCPU).clone());
  }
  manifest.set_total_bytes(total);
  absl::MutexLock lock(&mu_);
  jobs_[job_id] = std::move(published);
}

absl::StatusOr<std::vector<at::Tensor>> TestCoordinator::PublishDifference(
    const std::string& job_id, uint64_t version, const performer::PerformerModel& model,
    v1::Compression compression, DifferenceOptions difference_options) {
  Published published;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job ", job_id, " has no version to be a difference to"));
    }
    published = it->second;
  }
  const v1::ParameterManifest base_manifest = published.manifest;
  if (planner::ModelConfigToProto(model.config()).SerializeAsString() !=
          base_manifest.config().SerializeAsString() ||
      planner::DTypeToProto(model.dtype()) != base_manifest.dtype() ||
      model.parameters().size() != published.tensors.size()) {
    return absl::InvalidArgumentError("the new version's config or dtype differ from its base's");
  }
  published.base_version = published.version;
  published.version = version;
  published.compression = compression;
  published.ignore_request_base = difference_options.ignore_request_base;
  std::vector<at::Tensor> target;
  for (const at::Tensor& p : model.parameters()) target.push_back(p.detach());
  absl::StatusOr<performer::EncodedDifference> difference =
      performer::EncodeDifference(published.tensors, target, compression);
  if (!difference.ok()) return difference.status();
  published.difference = std::move(difference->encoded);
  const std::vector<at::Tensor> rebuilt = difference->rebuilt;
  published.sha256 = std::move(difference->sha256);
  if (difference_options.corrupt_sha256) {
    published.sha256[0] = published.sha256[0] == '0' ? '1' : '0';  // still 64 lowercase hex characters
  }
  published.tensors = rebuilt;
  published.manifest.set_parameter_version(version);
  absl::MutexLock lock(&mu_);
  jobs_[job_id] = std::move(published);
  return rebuilt;
}

void TestCoordinator::FinishJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  finished_.insert(job_id);
}

void TestCoordinator::SetFetchDelay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  fetch_delay_ = delay;
}

void TestCoordinator::SetManifestHook(std::function<void(v1::ParameterManifest*)> hook) {
  absl::MutexLock lock(&mu_);
  manifest_hook_ = std::move(hook);
}

int TestCoordinator::FetchCount(const std::string& job_id, uint64_t version) const {
  absl::MutexLock lock(&mu_);
  auto it = fetches_.find({job_id, version});
  return it == fetches_.end() ? 0 : it->second;
}

std::vector<uint64_t> TestCoordinator::FetchBaseVersions(const std::string& job_id, uint64_t version) const {
  absl::MutexLock lock(&mu_);
  auto it = fetch_bases_.find({job_id, version});
  return it == fetch_bases_.end() ? std::vector<uint64_t>() : it->second;
}

void TestCoordinator::SetUnavailable(bool unavailable) {
  absl::MutexLock lock(&mu_);
  unavailable_ = unavailable;
}

void TestCoordinator::ForgetWorkers() {
  absl::MutexLock lock(&mu_);
  live_.clear();
}

void TestCoordinator::LoseState() {
  absl::MutexLock lock(&mu_);
  live_.clear();
  incarnations_.clear();
  credentials_.clear();
}

void TestCoordinator::Supersede(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  ++incarnations_[worker_id];
}

std::vector<v1::RegisterWorkerRequest> TestCoordinator::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

std::vector<v1::HeartbeatRequest> TestCoordinator::heartbeats() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_;
}

std::vector<v1::DeregisterWorkerRequest> TestCoordinator::deregistrations() const {
  absl::MutexLock lock(&mu_);
  return deregistrations_;
}

bool TestCoordinator::WaitFor(const std::function<bool(const TestCoordinator&)>& predicate,
                              absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto holds = [&]() { return predicate(*this); };
  return mu_.AwaitWithTimeout(absl::Condition(&holds), timeout);
}

absl::StatusOr<std::string> TestCoordinator::Caller(const grpc::ServerContext& context) const {
  std::optional<std::string> token = rpc::BearerToken(context);
  auto it = token.has_value() ? credentials_.find(*token) : credentials_.end();
  if (it == credentials_.end()) return absl::UnauthenticatedError("missing or unknown worker credential");
  if (revoked_.count(it->second) > 0) {
    return absl::PermissionDeniedError(absl::StrCat("worker ", it->second, " was revoked"));
  }
  return it->second;
}

std::string TestCoordinator::AddWorker() {
  absl::MutexLock lock(&mu_);
  const std::string id = absl::StrFormat("w-%04d", next_worker_++);
  const std::string credential = absl::StrCat("wc-", id);
  credentials_[credential] = id;
  ++incarnations_[id];
  live_.insert(id);
  return credential;
}

void TestCoordinator::Revoke(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  revoked_.insert(worker_id);
}

std::string TestCoordinator::CoordinatorToken(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = incarnations_.find(worker_id);
  return it == incarnations_.end() ? "" : absl::StrCat("ct-", worker_id, "-", it->second);
}

grpc::Status TestCoordinator::CheckIncarnation(const std::string& worker_id, uint64_t incarnation) const {
  auto it = incarnations_.find(worker_id);
  if (it == incarnations_.end() || live_.count(worker_id) == 0) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("worker ", worker_id, " is not registered"));
  }
  if (incarnation != it->second) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("worker ", worker_id, " incarnation ", incarnation,
                                     " was superseded by incarnation ", it->second));
  }
  return grpc::Status::OK;
}

grpc::Status TestCoordinator::RegisterWorker(grpc::ServerContext* context,
                                             const v1::RegisterWorkerRequest* request,
                                             v1::RegisterWorkerResponse* response) {
  absl::MutexLock lock(&mu_);
  if (unavailable_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
  const std::optional<std::string> token = rpc::BearerToken(*context);
  const bool join = token.has_value() && base::ConstantTimeEquals(*token, options_.worker_token);
  std::string id;
  if (join) {
    registrations_.push_back(*request);
    id = absl::StrFormat("w-%04d", next_worker_++);
    const std::string credential = absl::StrCat("wc-", id);
    credentials_[credential] = id;
    response->set_credential(credential);
  } else {
    absl::StatusOr<std::string> caller = Caller(*context);
    if (!caller.ok()) return rpc::ToGrpcStatus(caller.status());
    registrations_.push_back(*request);
    id = *caller;
    if (!request->worker_id().empty() && request->worker_id() != id) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "a worker registers only as itself");
    }
    if (incarnations_.count(id) == 0) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("worker ", id, " is unknown: join again"));
    }
  }
  response->set_worker_id(id);
  response->set_incarnation(++incarnations_[id]);
  response->set_coordinator_token(absl::StrCat("ct-", id, "-", incarnations_[id]));
  live_.insert(id);
  response->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  response->set_lost_after_ms(options_.lost_after_ms);
  return grpc::Status::OK;
}

grpc::Status TestCoordinator::Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                                        v1::HeartbeatResponse* response) {
  absl::MutexLock lock(&mu_);
  if (unavailable_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
  absl::StatusOr<std::string> caller = Caller(*context);
  if (!caller.ok()) return rpc::ToGrpcStatus(caller.status());
  if (*caller != request->worker_id()) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "a worker heartbeats only as itself");
  }
  heartbeats_.push_back(*request);
  if (grpc::Status s = CheckIncarnation(request->worker_id(), request->incarnation()); !s.ok()) return s;
  response->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  response->set_lost_after_ms(options_.lost_after_ms);
  for (const std::string& job : finished_) response->add_finished_job_ids(job);
  return grpc::Status::OK;
}

grpc::Status TestCoordinator::DeregisterWorker(grpc::ServerContext* context,
                                               const v1::DeregisterWorkerRequest* request,
                                               v1::DeregisterWorkerResponse*) {
  absl::MutexLock lock(&mu_);
  if (unavailable_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
  absl::StatusOr<std::string> caller = Caller(*context);
  if (!caller.ok()) return rpc::ToGrpcStatus(caller.status());
  if (*caller != request->worker_id()) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "a worker deregisters only as itself");
  }
  deregistrations_.push_back(*request);
  return CheckIncarnation(request->worker_id(), request->incarnation());
}

grpc::Status TestCoordinator::FetchParameters(grpc::ServerContext* context,
                                              const v1::FetchParametersRequest* request,
                                              grpc::ServerWriter<v1::FetchParametersResponse>* writer) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::string> caller = Caller(*context);
    if (!caller.ok()) return rpc::ToGrpcStatus(caller.status());
  }
  Published published;
  absl::Duration delay;
  std::function<void(v1::ParameterManifest*)> hook;
  {
    absl::MutexLock lock(&mu_);
    ++fetches_[{request->job_id(), request->parameter_version()}];
    fetch_bases_[{request->job_id(), request->parameter_version()}].push_back(request->base_version());
    delay = fetch_delay_;
    hook = manifest_hook_;
    if (unavailable_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
    auto it = jobs_.find(request->job_id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("job ", request->job_id(), " is unknown"));
    }
    if (finished_.count(request->job_id()) > 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("job ", request->job_id(), " has finished"));
    }
    if (request->parameter_version() < it->second.version) {
      v1::ErrorDetail detail;
      detail.set_current_parameter_version(it->second.version);
      context->AddTrailingMetadata(rpc::kErrorDetailKey, detail.SerializeAsString());
      return grpc::Status(
          grpc::StatusCode::ABORTED,
          absl::StrCat("parameter version ", request->parameter_version(), " of job ", request->job_id(),
                       " is stale; the current version is ", it->second.version));
    }
    if (request->parameter_version() > it->second.version) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("parameter version ", request->parameter_version(), " of job ",
                                       request->job_id(), " was never published"));
    }
    published = it->second;
  }
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  // The difference to the version the worker holds, where it holds the published one's base.
  const bool difference = published.base_version != 0 && (published.ignore_request_base ||
                                                          request->base_version() == published.base_version);
  if (difference) {
    published.manifest.set_base_version(published.base_version);
    published.manifest.set_compression(published.compression);
    published.manifest.set_sha256(published.sha256);
  }
  if (hook) hook(&published.manifest);
  v1::FetchParametersResponse message;
  *message.mutable_manifest() = published.manifest;
  if (!writer->Write(message)) return grpc::Status(grpc::StatusCode::CANCELLED, "the worker went away");
  const performer::DType dtype =
      planner::DTypeFromProto(published.manifest.dtype(), "dtype").value_or(performer::DType::kFloat32);
  auto emit = [&](const v1::TensorChunk& chunk) {
    v1::FetchParametersResponse response;
    *response.mutable_chunk() = chunk;
    return writer->Write(response);
  };
  absl::Status streamed = difference ? performer::ChunkEncoded(published.names, published.difference, dtype,
                                                               emit, options_.max_chunk_bytes)
                                     : performer::ChunkTensors(published.names, published.tensors, dtype,
                                                               emit, options_.max_chunk_bytes);
  return rpc::ToGrpcStatus(streamed, context);
}

std::unique_ptr<TestCoordinatorServer> TestCoordinatorServer::Start(TestCoordinator* service, int port) {
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), &bound);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) return nullptr;
  return std::unique_ptr<TestCoordinatorServer>(new TestCoordinatorServer(std::move(server), bound));
}

void TestCoordinatorServer::Shutdown() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  server_->Wait();
  server_.reset();
}

}  // namespace slimfit::worker
