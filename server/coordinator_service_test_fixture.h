// Test-only, for //server:coordinator_service_test: CoordinatorService served over plaintext
// loopback gRPC on a real Coordinator with a temporary state directory, shared by the whole
// CoordinatorServiceTest suite — plainly, and once more with worker certificates required (mutual
// TLS; a plaintext call never has one). Its jobs are for cuda workers only, so the cpu workers
// registered here never get a shard and the jobs wait in QUEUED. Nothing waits on the clock: what
// needs a checkpoint watches the job until it is written.
//
// Example:
//   TEST_F(CoordinatorServiceTest, GetJobNeedsAClientToken) {
//     v1::GetJobRequest request;
//     request.set_job_id(suite().queued_job);
//     EXPECT_TRUE(Call(Bearer(kClientToken), Unary(&v1::Coordinator::Stub::GetJob, stub(), request)).ok());
//   }
#ifndef SLIMFIT_SERVER_COORDINATOR_SERVICE_TEST_FIXTURE_H_
#define SLIMFIT_SERVER_COORDINATOR_SERVICE_TEST_FIXTURE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "proto/slimfit.grpc.pb.h"
#include "server/access_tokens.h"
#include "server/coordinator.h"
#include "server/coordinator_service.h"

namespace slimfit::server {

inline constexpr char kClientToken[] = "ct-service-test";
inline constexpr char kJoinToken[] = "jt-service-test";
// The suite's coordinator takes uploads and models of up to 1 MiB.
inline constexpr int64_t kUploadLimit = int64_t{1} << 20;
inline constexpr int64_t kMaxModelBytes = int64_t{1} << 20;

std::string Bearer(absl::string_view token);

// One RPC: given a context, makes the call and returns its grpc::Status (a stream's Finish()).
using Rpc = std::function<grpc::Status(grpc::ClientContext*)>;
// Makes `call` with `authorization` as its metadata (none when empty) and a deadline; the status as
// a client sees it: code, message, and the ErrorDetail of the trailers as its payload.
absl::Status Call(const std::string& authorization, const Rpc& call);

// A unary RPC of `stub` with `request`; its response is dropped.
template <typename Request, typename Response>
Rpc Unary(grpc::Status (v1::Coordinator::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
          v1::Coordinator::Stub* stub, Request request) {
  return [=](grpc::ClientContext* context) {
    Response response;
    return (stub->*method)(context, request, &response);
  };
}

// A server stream of `stub` read to its end; the messages into *messages (when not null: pass {}
// for none).
template <typename Request, typename Response>
Rpc ReadAll(std::unique_ptr<grpc::ClientReader<Response>> (v1::Coordinator::Stub::*method)(
                grpc::ClientContext*, const Request&),
            v1::Coordinator::Stub* stub, Request request, std::vector<Response>* messages) {
  return [=](grpc::ClientContext* context) {
    std::unique_ptr<grpc::ClientReader<Response>> reader = (stub->*method)(context, request);
    Response message;
    while (reader->Read(&message)) {
      if (messages != nullptr) messages->push_back(message);
    }
    return reader->Finish();
  };
}

// UploadDataset: `messages` written in order (until a write fails: the coordinator answered), the
// response in *info (when not null).
Rpc Upload(v1::Coordinator::Stub* stub, std::vector<v1::UploadDatasetRequest> messages,
           v1::DatasetInfo* info = nullptr);
// The metadata message, then `bytes` as one chunk.
std::vector<v1::UploadDatasetRequest> UploadMessages(const v1::UploadMetadata& metadata,
                                                     const std::string& bytes);

// A CoordinatorService behind a gRPC server on 127.0.0.1 (a free port), and a stub to it. Destroyed in
// reverse order: the stub, the server (shut down), the service.
struct Served {
  std::unique_ptr<CoordinatorService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Coordinator::Stub> stub;
};
// Null when the server does not start.
std::unique_ptr<Served> Serve(Coordinator* coordinator, const AccessTokens* client_tokens,
                              const AccessTokens* join_tokens, bool require_worker_certificates);

// A worker as RegisterWorker answered.
struct Worker {
  std::string id;
  uint64_t incarnation = 0;
  std::string credential;
};

// What the suite shares.
struct ServiceSuite {
  std::string state_dir;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<AccessTokens> client_tokens;
  std::unique_ptr<AccessTokens> join_tokens;
  std::unique_ptr<Served> plain;
  std::unique_ptr<Served> mutual_tls;  // worker RPCs need a verified client certificate
  std::string dataset_id;              // TestCorpus()
  // Registered with the join token: `a` and `b` heartbeat and fetch; `revoked` was revoked;
  // `rejoining` registers again with its credential; `leaving` deregisters; `superseded` was
  // registered again, so `superseded.incarnation` is stale.
  Worker a, b, revoked, rejoining, leaving, superseded;
  // A QUEUED job (request id "queued") with its round-0 checkpoint, and a CANCELLED one that had
  // its round-0 checkpoint written before it was cancelled.
  std::string queued_job;
  v1::CheckpointWritten queued_checkpoint;
  std::string cancelled_job;
};

class CoordinatorServiceTest : public ::testing::Test {
 public:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;

  // REQUIRES: the suite is set up (inside its tests).
  static ServiceSuite& suite() { return *suite_; }
  static v1::Coordinator::Stub* stub() { return suite_->plain->stub.get(); }

  // TestJobSpec over the suite's dataset, for cuda workers only.
  static v1::SubmitJobRequest JobRequest(const std::string& request_id);
  static absl::StatusOr<v1::Job> Submit(const v1::SubmitJobRequest& request);
  // TestWorkerRequest() registered with `authorization`, claiming `worker_id`.
  static absl::StatusOr<Worker> Register(const std::string& authorization, const std::string& worker_id = "");
  // The job's first CheckpointWritten event, once written; nullopt when the stream ends without.
  static std::optional<v1::CheckpointWritten> AwaitCheckpoint(const std::string& job_id);

 private:
  static bool Build(ServiceSuite* suite);

  static ServiceSuite* suite_;
  static bool ready_;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_COORDINATOR_SERVICE_TEST_FIXTURE_H_
