// A stand-in for `slimfit-coordinator` in the CLI's tests: a real gRPC server on loopback (an
// ephemeral port) serving the Coordinator service's client RPCs with scripted answers, recording
// every request and the authorization metadata it came with. The CLI code under test talks to it
// over a real channel, exactly as it would to the coordinator.
//
// Example:
//   std::unique_ptr<FakeCoordinator> fake = FakeCoordinator::Start();
//   fake->get_job = [](const v1::GetJobRequest& request, v1::Job* job) {
//     if (request.job_id() != "job-1") return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
//     job->set_job_id("job-1");
//     return grpc::Status::OK;
//   };
//   ... run a command with --coordinator=fake->address() ...
//   EXPECT_EQ(fake->calls().get_job.size(), 1u);
//
// Handlers are plain public members: set them before the calls they answer (they are read on the
// server's threads without a lock). A handler left empty answers UNIMPLEMENTED, except
// upload_dataset, which by default answers a DatasetInfo for what it received (id "ds-" + the
// first 12 hex digits of the declared SHA-256). Worker RPCs are not served.
//
// Test-only. Thread safety: calls() and Shutdown() may be called from any thread.
#ifndef SLIMFIT_CLIENT_FAKE_COORDINATOR_H_
#define SLIMFIT_CLIENT_FAKE_COORDINATOR_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/slimfit.grpc.pb.h"

namespace slimfit::client {

// One UploadDataset stream as received.
struct ReceivedUpload {
  v1::UploadMetadata metadata;
  bool metadata_first = false;      // the first message carried the metadata
  std::vector<size_t> chunk_sizes;  // bytes of each chunk, in order
  std::string content;              // the chunks concatenated
};

// Every request received, per RPC, in arrival order.
struct ReceivedCalls {
  std::vector<ReceivedUpload> upload_dataset;
  std::vector<v1::SubmitJobRequest> submit_job;
  std::vector<v1::GetJobRequest> get_job;
  std::vector<v1::ListJobsRequest> list_jobs;
  std::vector<v1::WatchJobRequest> watch_job;
  std::vector<v1::CancelJobRequest> cancel_job;
  std::vector<v1::ListWorkersRequest> list_workers;
  std::vector<v1::GetMemoryPlanRequest> get_memory_plan;
  std::vector<v1::ExportModelRequest> export_model;
  std::vector<v1::RevokeWorkerRequest> revoke_worker;
  // The `authorization` metadata of every call ("" when absent), in arrival order.
  std::vector<std::string> authorizations;
};

class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  // Writes one message of a server stream; false once the client has gone.
  template <typename Message>
  using Writer = std::function<bool(const Message&)>;

  // Starts serving on 127.0.0.1 with an ephemeral port. Aborts (a broken test environment) when no
  // server can be started.
  static std::unique_ptr<FakeCoordinator> Start();
  ~FakeCoordinator() override;

  FakeCoordinator(const FakeCoordinator&) = delete;
  FakeCoordinator& operator=(const FakeCoordinator&) = delete;

  // "127.0.0.1:<port>".
  const std::string& address() const { return address_; }

  // Stops serving (in-flight calls are cancelled). Idempotent; the destructor calls it.
  void Shutdown();

  // A copy of everything received so far.
  ReceivedCalls calls() const;

  // UploadDataset answers as soon as the metadata has arrived, reading no chunk (a coordinator that
  // already holds the bytes may do so).
  bool upload_answers_after_metadata = false;

  // Scripted answers. The streaming ones get the 0-based index of the call among calls of that RPC,
  // so a test can answer a reconnect differently from the first call.
  std::function<grpc::Status(const ReceivedUpload&, v1::DatasetInfo*)> upload_dataset;
  std::function<grpc::Status(const v1::SubmitJobRequest&, v1::Job*)> submit_job;
  std::function<grpc::Status(const v1::GetJobRequest&, v1::Job*)> get_job;
  std::function<grpc::Status(const v1::ListJobsRequest&, v1::ListJobsResponse*)> list_jobs;
  std::function<grpc::Status(const v1::WatchJobRequest&, int call, const Writer<v1::JobEvent>&)> watch_job;
  std::function<grpc::Status(const v1::CancelJobRequest&, v1::Job*)> cancel_job;
  std::function<grpc::Status(const v1::ListWorkersRequest&, v1::ListWorkersResponse*)> list_workers;
  std::function<grpc::Status(const v1::GetMemoryPlanRequest&, v1::GetMemoryPlanResponse*)> get_memory_plan;
  std::function<grpc::Status(const v1::ExportModelRequest&, int call, const Writer<v1::ExportModelResponse>&)>
      export_model;
  std::function<grpc::Status(const v1::RevokeWorkerRequest&, v1::WorkerInfo*)> revoke_worker;

  // v1::Coordinator::Service.
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
  grpc::Status RevokeWorker(grpc::ServerContext* context, const v1::RevokeWorkerRequest* request,
                            v1::WorkerInfo* response) override;

 private:
  FakeCoordinator() = default;

  void RecordAuthorization(const grpc::ServerContext& context) ABSL_LOCKS_EXCLUDED(mutex_);

  // Constant after Start().
  std::string address_;
  std::unique_ptr<grpc::Server> server_;

  mutable absl::Mutex mutex_;
  ReceivedCalls calls_ ABSL_GUARDED_BY(mutex_);
  bool shut_down_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_FAKE_COORDINATOR_H_
