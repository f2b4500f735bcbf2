#include "client/fake_coordinator.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace slimfit::client {
namespace {

grpc::Status Unimplemented(const char* rpc) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      absl::StrCat("the fake coordinator has no ", rpc, " answer scripted"));
}

}  // namespace

std::unique_ptr<FakeCoordinator> FakeCoordinator::Start() {
  std::unique_ptr<FakeCoordinator> fake(new FakeCoordinator());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(fake.get());
  fake->server_ = builder.BuildAndStart();
  if (fake->server_ == nullptr || port == 0) {
    std::fprintf(stderr, "FakeCoordinator: cannot start a gRPC server on 127.0.0.1\n");
    std::abort();
  }
  fake->address_ = absl::StrCat("127.0.0.1:", port);
  return fake;
}

FakeCoordinator::~FakeCoordinator() { Shutdown(); }

void FakeCoordinator::Shutdown() {
  {
    absl::MutexLock lock(&mutex_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

ReceivedCalls FakeCoordinator::calls() const {
  absl::MutexLock lock(&mutex_);
  return calls_;
}

void FakeCoordinator::RecordAuthorization(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  std::string value =
      it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
  absl::MutexLock lock(&mutex_);
  calls_.authorizations.push_back(std::move(value));
}

grpc::Status FakeCoordinator::UploadDataset(grpc::ServerContext* context,
                                            grpc::ServerReader<v1::UploadDatasetRequest>* reader,
                                            v1::DatasetInfo* response) {
  RecordAuthorization(*context);
  ReceivedUpload upload;
  v1::UploadDatasetRequest message;
  bool first = true;
  while (reader->Read(&message)) {
    if (message.has_metadata()) {
      upload.metadata = message.metadata();
      upload.metadata_first = first;
      if (upload_answers_after_metadata) break;
    } else {
      upload.chunk_sizes.push_back(message.chunk().size());
      upload.content += message.chunk();
    }
    first = false;
  }
  {
    absl::MutexLock lock(&mutex_);
    calls_.upload_dataset.push_back(upload);
  }
  if (upload_dataset) return upload_dataset(upload, response);
  response->set_dataset_id(absl::StrCat("ds-", upload.metadata.sha256().substr(0, 12)));
  response->set_name(upload.metadata.name());
  response->set_content_type(upload.metadata.content_type());
  response->set_total_bytes(static_cast<int64_t>(upload.content.size()));
  response->set_sha256(upload.metadata.sha256());
  if (upload.metadata.content_type() == "text/plain") {
    response->set_tokens(static_cast<int64_t>(upload.content.size()));
    response->set_documents(1);
  }
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                                        v1::Job* response) {
  RecordAuthorization(*context);
  {
    absl::MutexLock lock(&mutex_);
    calls_.submit_job.push_back(*request);
  }
  return submit_job ? submit_job(*request, response) : Unimplemented("SubmitJob");
}

grpc::Status FakeCoordinator::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                     v1::Job* response) {
  RecordAuthorization(*context);
  {
    absl::MutexLock lock(&mutex_);
    calls_.get_job.push_back(*request);
  }
  return get_job ? get_job(*request, response) : Unimplemented("GetJob");
}

grpc::Status FakeCoordinator::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                                       v1::ListJobsResponse* response) {
  RecordAuthorization(*context);
  {
    absl::MutexLock lock(&mutex_);
    calls_.list_jobs.push_back(*request);
  }
  return list_jobs ? list_jobs(*request, response) : Unimplemented("ListJobs");
}

grpc::Status FakeCoordinator::WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                       grpc::ServerWriter<v1::JobEvent>* writer) {
  RecordAuthorization(*context);
  int call = 0;
  {
    absl::MutexLock lock(&mutex_);
    call = static_cast<int>(calls_.watch_job.size());
    calls_.watch_job.push_back(*request);
  }
  if (!watch_job) return Unimplemented("WatchJob");
  return watch_job(*request, call, [writer](const v1::JobEvent& event) { return writer->Write(event); });
}

grpc::Status FakeCoordinator::CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                                        v1::Job* response) {
  RecordAuthorization(*context);
  {
    absl::MutexLock lock(&mutex_);
    calls_.cancel_job.push_back(*request);
  }
  return cancel_job ? cancel_job(*request, response) : Unimplemented("CancelJob");
}

grpc::Status FakeCoordinator::ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                                          v1::ListWorkersResponse* response) {
  RecordAuthorization(*context);
  {
    absl::MutexLock lock(&mutex_);
    calls_.list_workers.push_back(*request);
  }
  return list_workers ? list_workers(*request, response) : Unimplemented("ListWorkers");
}

grpc::Status FakeCoordinator::RevokeWorker(grpc::ServerContext* context,
                                           const v1::RevokeWorkerRequest* request, v1::WorkerInfo* response) {
  RecordAuthorization(*context);
  {
    absl::MutexLock lock(&mutex_);
    calls_.revoke_worker.push_back(*request);
  }
  return revoke_worker ? revoke_worker(*request, response) : Unimplemented("RevokeWorker");
}

grpc::Status FakeCoordinator::GetMemoryPlan(grpc::ServerContext* context,
                                            const v1::GetMemoryPlanRequest* request,
                                            v1::GetMemoryPlanResponse* response) {
  RecordAuthorization(*context);
  {
    absl::MutexLock lock(&mutex_);
    calls_.get_memory_plan.push_back(*request);
  }
  return get_memory_plan ? get_memory_plan(*request, response) : Unimplemented("GetMemoryPlan");
}

grpc::Status FakeCoordinator::ExportModel(grpc::ServerContext* context, const v1::ExportModelRequest* request,
                                          grpc::ServerWriter<v1::ExportModelResponse>* writer) {
  RecordAuthorization(*context);
  int call = 0;
  {
    absl::MutexLock lock(&mutex_);
    call = static_cast<int>(calls_.export_model.size());
    calls_.export_model.push_back(*request);
  }
  if (!export_model) return Unimplemented("ExportModel");
  return export_model(*request, call,
                      [writer](const v1::ExportModelResponse& message) { return writer->Write(message); });
}

}  // namespace slimfit::client
