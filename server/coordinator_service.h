// The Coordinator gRPC service: the RPC edge over Coordinator. Checks the bearer token of every
// call (client RPCs need the client token, worker RPCs the worker token: missing or unknown →
// UNAUTHENTICATED, the other kind → PERMISSION_DENIED), turns absl statuses into grpc::Status with
// ErrorDetail trailers, and streams chunked payloads (uploads, parameters, exports).
//
// Thread safety: thread-safe (gRPC calls handlers from its thread pool).
#ifndef SLIMFIT_SERVER_COORDINATOR_SERVICE_H_
#define SLIMFIT_SERVER_COORDINATOR_SERVICE_H_

#include <string>

#include <grpcpp/grpcpp.h>

#include "proto/slimfit.grpc.pb.h"
#include "server/coordinator.h"

namespace slimfit::server {

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // `coordinator` is not owned and must outlive the service. Tokens must be non-empty and differ.
  CoordinatorService(Coordinator* coordinator, std::string client_token, std::string worker_token);

  grpc::Status UploadDataset(grpc::ServerContext* context, grpc::ServerReader<v1::UploadDatasetRequest>* reader,
                             v1::DatasetInfo* response) override;
  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request, v1::Job* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request, v1::Job* response) override;
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

 private:
  enum class Role { kClient, kWorker };
  absl::Status Authorize(const grpc::ServerContext& context, Role role, absl::string_view rpc) const;

  Coordinator* coordinator_;
  const std::string client_token_;
  const std::string worker_token_;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_COORDINATOR_SERVICE_H_
