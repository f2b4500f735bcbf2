#include "server/coordinator_service.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/verified_file.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "rpc/transport_security.h"
#include "wire/tensor_chunks.h"

namespace slimfit::server {

CoordinatorService::CoordinatorService(Coordinator* coordinator, const AccessTokens* client_tokens,
                                       const AccessTokens* join_tokens, bool require_worker_certificates)
    : coordinator_(coordinator),
      client_tokens_(client_tokens),
      join_tokens_(join_tokens),
      require_worker_certificates_(require_worker_certificates) {}

absl::StatusOr<CoordinatorService::Caller> CoordinatorService::Identify(const grpc::ServerContext& context,
                                                                        absl::string_view rpc) const {
  std::optional<std::string> token = rpc::BearerToken(context);
  if (!token.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat(rpc, ": missing \"authorization: Bearer <token>\" metadata"));
  }
  Caller caller;
  if (client_tokens_->Accepts(*token)) {
    caller.kind = Caller::Kind::kClient;
  } else if (join_tokens_->Accepts(*token)) {
    caller.kind = Caller::Kind::kJoin;
  } else if (std::optional<std::string> worker = coordinator_->registry().WorkerOfCredential(*token)) {
    caller.kind = Caller::Kind::kWorker;
    caller.worker_id = *std::move(worker);
  } else {
    return absl::UnauthenticatedError(absl::StrCat(rpc, ": unknown token"));
  }
  return caller;
}

absl::Status CoordinatorService::AuthorizeClient(const grpc::ServerContext& context,
                                                 absl::string_view rpc) const {
  absl::StatusOr<Caller> caller = Identify(context, rpc);
  if (!caller.ok()) return caller.status();
  if (caller->kind != Caller::Kind::kClient) {
    return absl::PermissionDeniedError(absl::StrCat(rpc, ": a worker's token cannot call client RPCs"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::CheckWorkerCertificate(const grpc::ServerContext& context,
                                                        absl::string_view rpc) const {
  if (!require_worker_certificates_ || rpc::HasVerifiedClientCertificate(context)) return absl::OkStatus();
  return absl::UnauthenticatedError(absl::StrCat(
      rpc, ": workers must present a TLS client certificate signed by the coordinator's --tls_ca"));
}

absl::StatusOr<std::optional<std::string>> CoordinatorService::AuthorizeRegistration(
    const grpc::ServerContext& context) const {
  absl::StatusOr<Caller> caller = Identify(context, "RegisterWorker");
  if (!caller.ok()) return caller.status();
  if (caller->kind == Caller::Kind::kClient) {
    return absl::PermissionDeniedError(
        "RegisterWorker: a client token cannot register a worker; use a join token");
  }
  if (absl::Status cert = CheckWorkerCertificate(context, "RegisterWorker"); !cert.ok()) return cert;
  if (caller->kind == Caller::Kind::kJoin) return std::optional<std::string>();
  return std::optional<std::string>(caller->worker_id);
}

absl::Status CoordinatorService::AuthorizeWorker(const grpc::ServerContext& context, absl::string_view rpc,
                                                 const std::string& worker_id) const {
  absl::StatusOr<Caller> caller = Identify(context, rpc);
  if (!caller.ok()) return caller.status();
  if (caller->kind == Caller::Kind::kClient) {
    return absl::PermissionDeniedError(absl::StrCat(rpc, ": a client token cannot call worker RPCs"));
  }
  if (caller->kind == Caller::Kind::kJoin) {
    return absl::PermissionDeniedError(absl::StrCat(
        rpc, ": a join token only registers workers; use the credential RegisterWorker returned"));
  }
  if (absl::Status cert = CheckWorkerCertificate(context, rpc); !cert.ok()) return cert;
  if (absl::Status revoked = coordinator_->registry().CheckNotRevoked(caller->worker_id); !revoked.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(rpc, ": ", revoked.message()));
  }
  if (!worker_id.empty() && worker_id != caller->worker_id) {
    return absl::PermissionDeniedError(
        absl::StrCat(rpc, ": worker ", caller->worker_id, " cannot act as ", worker_id));
  }
  return absl::OkStatus();
}

#define SLIMFIT_AUTHORIZE_CLIENT(rpc_name)                                   \
  if (absl::Status auth = AuthorizeClient(*context, rpc_name); !auth.ok()) { \
    return rpc::ToGrpcStatus(auth, context);                                 \
  }

#define SLIMFIT_AUTHORIZE_WORKER(rpc_name, worker_id)                                   \
  if (absl::Status auth = AuthorizeWorker(*context, rpc_name, worker_id); !auth.ok()) { \
    return rpc::ToGrpcStatus(auth, context);                                            \
  }

template <typename T>
grpc::Status Answer(absl::StatusOr<T> result, T* response, grpc::ServerContext* context) {
  if (!result.ok()) return rpc::ToGrpcStatus(result.status(), context);
  *response = *std::move(result);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::UploadDataset(grpc::ServerContext* context,
                                               grpc::ServerReader<v1::UploadDatasetRequest>* reader,
                                               v1::DatasetInfo* response) {
  SLIMFIT_AUTHORIZE_CLIENT("UploadDataset");
  v1::UploadDatasetRequest message;
  if (!reader->Read(&message)) {
    return rpc::ToGrpcStatus(absl::InvalidArgumentError("UploadDataset: empty stream; send metadata first"),
                             context);
  }
  if (!message.has_metadata()) {
    return rpc::ToGrpcStatus(
        absl::InvalidArgumentError("UploadDataset: the first message must carry metadata"), context);
  }
  std::optional<v1::DatasetInfo> existing;
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = coordinator_->BeginUpload(message.metadata(), &existing);
  if (!sink.ok()) return rpc::ToGrpcStatus(sink.status(), context);
  if (existing.has_value()) {
    *response = *existing;
    return grpc::Status::OK;
  }
  while (reader->Read(&message)) {
    if (message.has_metadata()) {
      return rpc::ToGrpcStatus(absl::InvalidArgumentError("UploadDataset: metadata repeated"), context);
    }
    if (absl::Status written = (*sink)->Write(message.chunk()); !written.ok()) {
      return rpc::ToGrpcStatus(written, context);
    }
  }
  return Answer((*sink)->Finish(), response, context);
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                                           v1::Job* response) {
  SLIMFIT_AUTHORIZE_CLIENT("SubmitJob");
  return Answer(coordinator_->SubmitJob(*request), response, context);
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                        v1::Job* response) {
  SLIMFIT_AUTHORIZE_CLIENT("GetJob");
  return Answer(coordinator_->GetJob(request->job_id()), response, context);
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                                          v1::ListJobsResponse* response) {
  SLIMFIT_AUTHORIZE_CLIENT("ListJobs");
  return Answer(coordinator_->ListJobs(*request), response, context);
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                          grpc::ServerWriter<v1::JobEvent>* writer) {
  SLIMFIT_AUTHORIZE_CLIENT("WatchJob");
  absl::Status status = coordinator_->WatchJob(
      *request, [&](const v1::JobEvent& event) { return writer->Write(event); },
      [&] { return context->IsCancelled(); });
  return rpc::ToGrpcStatus(status, context);
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                                           v1::Job* response) {
  SLIMFIT_AUTHORIZE_CLIENT("CancelJob");
  return Answer(coordinator_->CancelJob(*request, rpc::CallDeadline(*context)), response, context);
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* context,
                                             const v1::ListWorkersRequest* request,
                                             v1::ListWorkersResponse* response) {
  SLIMFIT_AUTHORIZE_CLIENT("ListWorkers");
  return Answer(coordinator_->ListWorkers(*request), response, context);
}

grpc::Status CoordinatorService::GetMemoryPlan(grpc::ServerContext* context,
                                               const v1::GetMemoryPlanRequest* request,
                                               v1::GetMemoryPlanResponse* response) {
  SLIMFIT_AUTHORIZE_CLIENT("GetMemoryPlan");
  return Answer(coordinator_->GetMemoryPlan(*request), response, context);
}

grpc::Status CoordinatorService::ExportModel(grpc::ServerContext* context,
                                             const v1::ExportModelRequest* request,
                                             grpc::ServerWriter<v1::ExportModelResponse>* writer) {
  SLIMFIT_AUTHORIZE_CLIENT("ExportModel");
  v1::ExportModelResponse message;
  absl::StatusOr<CheckpointRecord> checkpoint =
      coordinator_->ExportCheckpoint(*request, message.mutable_header());
  if (!checkpoint.ok()) return rpc::ToGrpcStatus(checkpoint.status(), context);
  // The file is hashed as it goes out and compared with the digest recorded when it was written:
  // a file changed on disk since ends the stream with DATA_LOSS instead of the trailer, and the
  // client discards what it received (ExportModelResponse.trailer).
  if (!writer->Write(message)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  int64_t sent = 0;
  bool client_gone = false;
  const absl::Status streamed =
      base::StreamVerifiedFile(checkpoint->model_path, {checkpoint->bytes, checkpoint->sha256},
                               static_cast<size_t>(v1::LIMIT_MAX_CHUNK_BYTES), [&](absl::string_view chunk) {
                                 message.Clear();
                                 message.set_chunk(chunk.data(), chunk.size());
                                 sent += static_cast<int64_t>(chunk.size());
                                 client_gone = !writer->Write(message);
                                 return !client_gone;
                               });
  if (client_gone) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  if (!streamed.ok()) {
    base::LogError("ExportModel of ", request->job_id(), " round ", checkpoint->round, ": ",
                   streamed.message());
    return rpc::ToGrpcStatus(
        absl::Status(streamed.code(), absl::StrCat("checkpoint of round ", checkpoint->round, " of ",
                                                   request->job_id(), ": ", streamed.message())),
        context);
  }
  message.Clear();
  message.mutable_trailer()->set_total_bytes(sent);
  message.mutable_trailer()->set_sha256(checkpoint->sha256);
  writer->Write(message);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::RegisterWorker(grpc::ServerContext* context,
                                                const v1::RegisterWorkerRequest* request,
                                                v1::RegisterWorkerResponse* response) {
  absl::StatusOr<std::optional<std::string>> holder = AuthorizeRegistration(*context);
  if (!holder.ok()) return rpc::ToGrpcStatus(holder.status(), context);
  return Answer(coordinator_->registry().Register(*request, *holder), response, context);
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                                           v1::HeartbeatResponse* response) {
  SLIMFIT_AUTHORIZE_WORKER("Heartbeat", request->worker_id());
  return Answer(coordinator_->registry().Heartbeat(*request), response, context);
}

grpc::Status CoordinatorService::DeregisterWorker(grpc::ServerContext* context,
                                                  const v1::DeregisterWorkerRequest* request,
                                                  v1::DeregisterWorkerResponse* response) {
  SLIMFIT_AUTHORIZE_WORKER("DeregisterWorker", request->worker_id());
  return rpc::ToGrpcStatus(coordinator_->registry().Deregister(*request), context);
}

grpc::Status CoordinatorService::FetchParameters(grpc::ServerContext* context,
                                                 const v1::FetchParametersRequest* request,
                                                 grpc::ServerWriter<v1::FetchParametersResponse>* writer) {
  SLIMFIT_AUTHORIZE_WORKER("FetchParameters", "");
  absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> snapshot = coordinator_->Parameters(*request);
  if (!snapshot.ok()) return rpc::ToGrpcStatus(snapshot.status(), context);
  const ParameterSnapshot& parameters = **snapshot;
  v1::FetchParametersResponse message;
  v1::ParameterManifest* manifest = message.mutable_manifest();
  manifest->set_job_id(request->job_id());
  manifest->set_parameter_version(parameters.version);
  *manifest->mutable_config() = planner::ModelConfigToProto(parameters.config);
  manifest->set_dtype(planner::DTypeToProto(parameters.dtype));
  int64_t total = 0;
  for (size_t i = 0; i < parameters.names.size(); ++i) {
    performer::TensorSpec spec{parameters.names[i], parameters.tensors[i].sizes().vec()};
    *manifest->add_tensors() = performer::ToTensorInfo(spec, parameters.dtype);
    total += manifest->tensors(static_cast<int>(i)).bytes();
  }
  manifest->set_total_bytes(total);
  manifest->set_feature_seed(parameters.feature_seed);
  // A worker holding the version this one was rebuilt from gets the encoded difference; one holding
  // any earlier version of a job that trains a subset, only the tensors that change.
  const bool difference = parameters.base_version != 0 && request->base_version() == parameters.base_version;
  const bool partial = !parameters.sent_tensors.empty() && request->base_version() != 0 &&
                       request->base_version() < parameters.version;
  manifest->set_compression(difference ? parameters.compression : v1::COMPRESSION_NONE);
  if (difference) {
    manifest->set_base_version(parameters.base_version);
    manifest->set_sha256(parameters.sha256);
  } else if (partial) {
    manifest->set_base_version(request->base_version());
    manifest->set_sha256(parameters.sha256);
    for (const int index : parameters.sent_tensors) manifest->add_sent_tensors(index);
  }
  if (!writer->Write(message)) return grpc::Status(grpc::StatusCode::CANCELLED, "worker went away");
  int64_t sent = 0;
  auto emit = [&](const v1::TensorChunk& chunk) {
    v1::FetchParametersResponse piece;
    *piece.mutable_chunk() = chunk;
    sent += performer::ChunkWireBytes(chunk);
    return writer->Write(piece);
  };
  absl::Status streamed;
  if (difference) {
    streamed = performer::ChunkEncoded(parameters.names, parameters.difference, parameters.dtype, emit);
  } else if (partial) {
    std::vector<std::string> names;
    std::vector<at::Tensor> tensors;
    for (const int index : parameters.sent_tensors) {
      names.push_back(parameters.names[static_cast<size_t>(index)]);
      tensors.push_back(parameters.tensors[static_cast<size_t>(index)]);
    }
    streamed = performer::ChunkTensors(names, tensors, parameters.dtype, emit);
  } else {
    streamed = performer::ChunkTensors(parameters.names, parameters.tensors, parameters.dtype, emit);
  }
  parameters.bytes_served.fetch_add(sent);
  return rpc::ToGrpcStatus(streamed, context);
}

grpc::Status CoordinatorService::RevokeWorker(grpc::ServerContext* context,
                                              const v1::RevokeWorkerRequest* request,
                                              v1::WorkerInfo* response) {
  SLIMFIT_AUTHORIZE_CLIENT("RevokeWorker");
  if (request->reason().size() > 1024) {
    return rpc::ToGrpcStatus(rpc::InvalidFieldError("reason", "longer than 1024 bytes"), context);
  }
  absl::StatusOr<v1::WorkerInfo> revoked =
      coordinator_->registry().Revoke(request->worker_id(), request->reason());
  if (revoked.ok()) coordinator_->WorkersChanged();
  return Answer(std::move(revoked), response, context);
}

}  // namespace slimfit::server
