#include "server/coordinator_service_test_fixture.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "rpc/rpc_util.h"
#include "server/test_job_spec.h"
#include "server/test_worker_request.h"

namespace slimfit::server {

std::string Bearer(absl::string_view token) { return absl::StrCat("Bearer ", token); }

absl::Status Call(const std::string& authorization, const Rpc& call) {
  grpc::ClientContext context;
  if (!authorization.empty()) context.AddMetadata(rpc::kAuthorizationKey, authorization);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  const grpc::Status status = call(&context);
  return rpc::FromGrpcStatus(status, "rpc", &context);
}

Rpc Upload(v1::Coordinator::Stub* stub, std::vector<v1::UploadDatasetRequest> messages,
           v1::DatasetInfo* info) {
  return [stub, messages = std::move(messages), info](grpc::ClientContext* context) {
    v1::DatasetInfo dropped;
    std::unique_ptr<grpc::ClientWriter<v1::UploadDatasetRequest>> writer =
        stub->UploadDataset(context, info != nullptr ? info : &dropped);
    for (const v1::UploadDatasetRequest& message : messages) {
      if (!writer->Write(message)) break;  // the coordinator answered early
    }
    writer->WritesDone();
    return writer->Finish();
  };
}

std::vector<v1::UploadDatasetRequest> UploadMessages(const v1::UploadMetadata& metadata,
                                                     const std::string& bytes) {
  std::vector<v1::UploadDatasetRequest> messages(2);
  *messages[0].mutable_metadata() = metadata;
  messages[1].set_chunk(bytes);
  return messages;
}

std::unique_ptr<Served> Serve(Coordinator* coordinator, const AccessTokens* client_tokens,
                              const AccessTokens* join_tokens, bool require_worker_certificates) {
  auto served = std::make_unique<Served>();
  served->service = std::make_unique<CoordinatorService>(coordinator, client_tokens, join_tokens,
                                                         require_worker_certificates);
  // Loopback rather than gRPC's in-process channel: an in-process client stream blocks in Write when
  // the server answers without reading it (an UploadDataset refused at once), which TCP buffers.
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(served->service.get());
  served->server = builder.BuildAndStart();
  if (served->server == nullptr || port == 0) return nullptr;
  served->stub = v1::Coordinator::NewStub(rpc::MakeChannel(absl::StrCat("127.0.0.1:", port)));
  return served;
}

ServiceSuite* CoordinatorServiceTest::suite_ = nullptr;
bool CoordinatorServiceTest::ready_ = false;

void CoordinatorServiceTest::SetUpTestSuite() {
  suite_ = new ServiceSuite();
  ready_ = Build(suite_);
}

void CoordinatorServiceTest::TearDownTestSuite() {
  delete suite_;  // the servers first, then the tokens and the coordinator
  suite_ = nullptr;
}

void CoordinatorServiceTest::SetUp() { ASSERT_TRUE(ready_) << "the suite's coordinator did not start"; }

v1::SubmitJobRequest CoordinatorServiceTest::JobRequest(const std::string& request_id) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = TestJobSpec(suite_->dataset_id);
  request.mutable_spec()->mutable_constraints()->add_device_kinds("cuda");
  request.set_request_id(request_id);
  return request;
}

absl::StatusOr<v1::Job> CoordinatorServiceTest::Submit(const v1::SubmitJobRequest& request) {
  v1::Job job;
  absl::Status status = Call(Bearer(kClientToken), [&](grpc::ClientContext* context) {
    return stub()->SubmitJob(context, request, &job);
  });
  if (!status.ok()) return status;
  return job;
}

absl::StatusOr<Worker> CoordinatorServiceTest::Register(const std::string& authorization,
                                                        const std::string& worker_id) {
  v1::RegisterWorkerRequest request = TestWorkerRequest();
  request.set_worker_id(worker_id);
  v1::RegisterWorkerResponse response;
  absl::Status status = Call(authorization, [&](grpc::ClientContext* context) {
    return stub()->RegisterWorker(context, request, &response);
  });
  if (!status.ok()) return status;
  return Worker{response.worker_id(), response.incarnation(), response.credential()};
}

std::optional<v1::CheckpointWritten> CoordinatorServiceTest::AwaitCheckpoint(const std::string& job_id) {
  grpc::ClientContext context;
  context.AddMetadata(rpc::kAuthorizationKey, Bearer(kClientToken));
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_from_start(true);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub()->WatchJob(&context, request);
  v1::JobEvent event;
  std::optional<v1::CheckpointWritten> written;
  while (!written.has_value() && reader->Read(&event)) {
    if (event.has_checkpoint_written()) written = event.checkpoint_written();
  }
  context.TryCancel();
  (void)reader->Finish();
  return written;
}

bool CoordinatorServiceTest::Build(ServiceSuite* s) {
  s->state_dir = testing_util::TempPath("coordinator_service");
  CoordinatorOptions options;
  options.state_dir = s->state_dir;
  options.registry.lost_after = absl::Hours(1);  // the workers here never heartbeat by themselves
  options.upload_limit_bytes = kUploadLimit;
  options.max_model_bytes = kMaxModelBytes;
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator = Coordinator::Create(options);
  absl::StatusOr<std::unique_ptr<AccessTokens>> client = AccessTokens::Create("client", kClientToken, "");
  absl::StatusOr<std::unique_ptr<AccessTokens>> join = AccessTokens::Create("join", kJoinToken, "");
  if (!coordinator.ok() || !client.ok() || !join.ok()) {
    ADD_FAILURE() << coordinator.status() << client.status() << join.status();
    return false;
  }
  s->coordinator = *std::move(coordinator);
  s->client_tokens = *std::move(client);
  s->join_tokens = *std::move(join);
  s->plain = Serve(s->coordinator.get(), s->client_tokens.get(), s->join_tokens.get(), false);
  s->mutual_tls = Serve(s->coordinator.get(), s->client_tokens.get(), s->join_tokens.get(), true);
  if (s->plain == nullptr || s->mutual_tls == nullptr) {
    ADD_FAILURE() << "no gRPC server";
    return false;
  }

  const std::string corpus = TestCorpus();
  v1::DatasetInfo info;
  const absl::Status uploaded =
      Call(Bearer(kClientToken), Upload(stub(), UploadMessages(TestCorpusMetadata(corpus), corpus), &info));
  if (!uploaded.ok()) {
    ADD_FAILURE() << uploaded;
    return false;
  }
  s->dataset_id = info.dataset_id();

  for (Worker* worker : {&s->a, &s->b, &s->revoked, &s->rejoining, &s->leaving, &s->superseded}) {
    absl::StatusOr<Worker> registered = Register(Bearer(kJoinToken));
    if (!registered.ok()) {
      ADD_FAILURE() << registered.status();
      return false;
    }
    *worker = *registered;
  }
  absl::StatusOr<Worker> again = Register(Bearer(s->superseded.credential), s->superseded.id);
  v1::RevokeWorkerRequest revoke;
  revoke.set_worker_id(s->revoked.id);
  revoke.set_reason("stolen laptop");
  v1::WorkerInfo revoked_info;
  const absl::Status revoked = Call(Bearer(kClientToken), [&](grpc::ClientContext* context) {
    return stub()->RevokeWorker(context, revoke, &revoked_info);
  });
  if (!again.ok() || !revoked.ok()) {
    ADD_FAILURE() << again.status() << revoked;
    return false;
  }

  absl::StatusOr<v1::Job> queued = Submit(JobRequest("queued"));
  absl::StatusOr<v1::Job> cancelled = Submit(JobRequest("cancelled"));
  if (!queued.ok() || !cancelled.ok()) {
    ADD_FAILURE() << queued.status() << cancelled.status();
    return false;
  }
  s->queued_job = queued->job_id();
  s->cancelled_job = cancelled->job_id();
  std::optional<v1::CheckpointWritten> checkpoint = AwaitCheckpoint(s->queued_job);
  std::optional<v1::CheckpointWritten> cancelled_checkpoint = AwaitCheckpoint(s->cancelled_job);
  if (!checkpoint.has_value() || !cancelled_checkpoint.has_value()) {
    ADD_FAILURE() << "no round-0 checkpoint";
    return false;
  }
  s->queued_checkpoint = *checkpoint;
  v1::CancelJobRequest cancel;
  cancel.set_job_id(s->cancelled_job);
  v1::Job cancelled_now;
  const absl::Status cancelled_status = Call(Bearer(kClientToken), [&](grpc::ClientContext* context) {
    return stub()->CancelJob(context, cancel, &cancelled_now);
  });
  if (!cancelled_status.ok() || cancelled_now.state() != v1::JOB_STATE_CANCELLED) {
    ADD_FAILURE() << cancelled_status << cancelled_now.ShortDebugString();
    return false;
  }
  return true;
}

}  // namespace slimfit::server
