// The Coordinator gRPC service: the RPC edge over Coordinator. Identifies the bearer of every call
// — a client token, a join token, or a worker's credential (proto/slimfit.proto, "Authentication")
// — and lets it call only its own RPCs: client RPCs need a client token; RegisterWorker a join
// token or a credential; the other worker RPCs a credential, acting only as its own worker, not
// revoked, and (with mutual TLS) over a connection with a verified client certificate. Missing or
// unknown bearer → UNAUTHENTICATED; wrong kind, another worker's id, revoked → PERMISSION_DENIED.
// Turns absl statuses into grpc::Status with ErrorDetail trailers and streams chunked payloads
// (uploads, parameters, exports).
//
// Thread safety: thread-safe (gRPC calls handlers from its thread pool).
#ifndef SLIMFIT_SERVER_COORDINATOR_SERVICE_H_
#define SLIMFIT_SERVER_COORDINATOR_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "proto/slimfit.grpc.pb.h"
#include "server/access_tokens.h"
#include "server/coordinator.h"

namespace slimfit::server {

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // None of the pointers is owned; all must outlive the service. With
  // `require_worker_certificates` (mutual TLS), worker RPCs need a verified client certificate.
  CoordinatorService(Coordinator* coordinator, const AccessTokens* client_tokens,
                     const AccessTokens* join_tokens, bool require_worker_certificates);

  grpc::Status UploadDataset(grpc::ServerContext* context,
                             grpc::ServerReader<v1::UploadDatasetRequest>* reader,
                             v1::DatasetInfo* response) override;
  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::Job* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status GetMemoryPlan(grpc::ServerContext* context, const v1::GetMemoryPlanRequest* request,
                             v1::GetMemoryPlanResponse* response) override;
  grpc::Status ExportModel(grpc::ServerContext* context, const v1::ExportModelRequest* request,
                           grpc::ServerWriter<v1::ExportModelResponse>* writer) override;
  grpc::Status RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status DeregisterWorker(grpc::ServerContext* context, const v1::DeregisterWorkerRequest* request,
                                v1::DeregisterWorkerResponse* response) override;
  grpc::Status FetchParameters(grpc::ServerContext* context, const v1::FetchParametersRequest* request,
                               grpc::ServerWriter<v1::FetchParametersResponse>* writer) override;
  grpc::Status RevokeWorker(grpc::ServerContext* context, const v1::RevokeWorkerRequest* request,
                            v1::WorkerInfo* response) override;

 private:
  // Who is calling.
  struct Caller {
    enum class Kind { kClient, kJoin, kWorker } kind = Kind::kClient;
    std::string worker_id;  // kWorker
  };
  absl::StatusOr<Caller> Identify(const grpc::ServerContext& context, absl::string_view rpc) const;
  // OK for a client token.
  absl::Status AuthorizeClient(const grpc::ServerContext& context, absl::string_view rpc) const;
  // A join token or a credential (RegisterWorker): the credential's worker, or nullopt for a join.
  absl::StatusOr<std::optional<std::string>> AuthorizeRegistration(const grpc::ServerContext& context) const;
  // A credential of a worker not revoked, acting as `worker_id` (any worker when empty).
  absl::Status AuthorizeWorker(const grpc::ServerContext& context, absl::string_view rpc,
                               const std::string& worker_id) const;
  absl::Status CheckWorkerCertificate(const grpc::ServerContext& context, absl::string_view rpc) const;

  Coordinator* const coordinator_;
  const AccessTokens* const client_tokens_;
  const AccessTokens* const join_tokens_;
  const bool require_worker_certificates_;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_COORDINATOR_SERVICE_H_
