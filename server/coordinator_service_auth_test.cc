// CoordinatorService: which bearer may call which RPC. A missing, malformed or unknown bearer is
// UNAUTHENTICATED; a client token on a worker RPC, a join token anywhere but RegisterWorker, a
// worker credential on a client RPC, another worker's credential or a revoked one is
// PERMISSION_DENIED; the right one passes. With worker certificates required, a worker's bearer
// alone is UNAUTHENTICATED. The suite is coordinator_service_test_fixture.h's.
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator_service_test_fixture.h"
#include "server/test_job_spec.h"
#include "server/test_worker_request.h"

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;
using Code = absl::StatusCode;

// The client RPCs, each a request that succeeds with a client token.
std::vector<std::pair<std::string, Rpc>> ClientRpcs(v1::Coordinator::Stub* stub) {
  const ServiceSuite& s = CoordinatorServiceTest::suite();
  const std::string corpus = TestCorpus();
  v1::GetJobRequest get;
  get.set_job_id(s.queued_job);
  v1::WatchJobRequest watch;
  watch.set_job_id(s.cancelled_job);
  watch.set_from_start(true);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(s.cancelled_job);
  v1::GetMemoryPlanRequest plan;
  plan.set_worker_id(s.a.id);
  *plan.mutable_spec()->mutable_model() = TestJobSpec(s.dataset_id).model();
  plan.mutable_spec()->set_sequence_length(64);
  v1::ExportModelRequest export_model;
  export_model.set_job_id(s.queued_job);
  v1::RevokeWorkerRequest revoke;
  revoke.set_worker_id(s.revoked.id);
  const v1::SubmitJobRequest submit = CoordinatorServiceTest::JobRequest("queued");  // a retry: the same job
  using Stub = v1::Coordinator::Stub;
  return {
      {"UploadDataset", Upload(stub, UploadMessages(TestCorpusMetadata(corpus), corpus))},
      {"SubmitJob", Unary(&Stub::SubmitJob, stub, submit)},
      {"GetJob", Unary(&Stub::GetJob, stub, get)},
      {"ListJobs", Unary(&Stub::ListJobs, stub, v1::ListJobsRequest())},
      {"WatchJob", ReadAll(&Stub::WatchJob, stub, watch, {})},
      {"CancelJob", Unary(&Stub::CancelJob, stub, cancel)},
      {"ListWorkers", Unary(&Stub::ListWorkers, stub, v1::ListWorkersRequest())},
      {"GetMemoryPlan", Unary(&Stub::GetMemoryPlan, stub, plan)},
      {"ExportModel", ReadAll(&Stub::ExportModel, stub, export_model, {})},
      {"RevokeWorker", Unary(&Stub::RevokeWorker, stub, revoke)},
  };
}

TEST_F(CoordinatorServiceTest, ClientRpcsTakeOnlyAClientToken) {
  const ServiceSuite& s = suite();
  const std::vector<std::pair<std::string, Code>> bearers = {
      {"", Code::kUnauthenticated},
      {"Bearer not-a-token", Code::kUnauthenticated},
      {absl::StrCat("Basic ", kClientToken), Code::kUnauthenticated},
      {Bearer(kJoinToken), Code::kPermissionDenied},
      {Bearer(s.a.credential), Code::kPermissionDenied},
      {Bearer(s.revoked.credential), Code::kPermissionDenied},
      {Bearer(kClientToken), Code::kOk},
  };
  for (const auto& [name, rpc] : ClientRpcs(stub())) {
    for (const auto& [authorization, code] : bearers) {
      const absl::Status status = Call(authorization, rpc);
      EXPECT_EQ(status.code(), code) << name << " with \"" << authorization << "\": " << status;
    }
  }
  // Requiring worker certificates changes nothing for clients.
  for (const auto& [name, rpc] : ClientRpcs(s.mutual_tls->stub.get())) {
    EXPECT_TRUE(Call(Bearer(kClientToken), rpc).ok()) << name;
    EXPECT_EQ(Call(Bearer(s.a.credential), rpc).code(), Code::kPermissionDenied) << name;
  }
}

TEST_F(CoordinatorServiceTest, WorkerRpcsTakeTheWorkersOwnCredential) {
  const ServiceSuite& s = suite();
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_worker_id(s.a.id);
  heartbeat.set_incarnation(s.a.incarnation);
  heartbeat.set_state(v1::WORKER_STATE_IDLE);
  v1::DeregisterWorkerRequest deregister;
  deregister.set_worker_id(s.leaving.id);
  deregister.set_incarnation(s.leaving.incarnation);
  v1::FetchParametersRequest fetch;
  fetch.set_job_id(s.queued_job);
  fetch.set_parameter_version(1);
  struct Row {
    std::string name;
    std::function<Rpc(v1::Coordinator::Stub*)> rpc;
    std::string own;      // the credential the call succeeds with
    Code another_worker;  // with another worker's credential
  };
  using Stub = v1::Coordinator::Stub;
  const std::vector<Row> rows = {
      {"Heartbeat", [=](Stub* stub) { return Unary(&Stub::Heartbeat, stub, heartbeat); }, s.a.credential,
       Code::kPermissionDenied},
      {"DeregisterWorker", [=](Stub* stub) { return Unary(&Stub::DeregisterWorker, stub, deregister); },
       s.leaving.credential, Code::kPermissionDenied},
      // Parameters are any worker's to fetch.
      {"FetchParameters", [=](Stub* stub) { return ReadAll(&Stub::FetchParameters, stub, fetch, {}); },
       s.a.credential, Code::kOk},
  };
  for (const Row& row : rows) {
    const Rpc rpc = row.rpc(stub());
    const std::vector<std::pair<std::string, Code>> bearers = {
        {"", Code::kUnauthenticated},
        {"Bearer not-a-token", Code::kUnauthenticated},
        {absl::StrCat("Basic ", row.own), Code::kUnauthenticated},
        {Bearer(kClientToken), Code::kPermissionDenied},
        {Bearer(kJoinToken), Code::kPermissionDenied},
        {Bearer(s.revoked.credential), Code::kPermissionDenied},
        {Bearer(s.b.credential), row.another_worker},
        {Bearer(row.own), Code::kOk},
    };
    for (const auto& [authorization, code] : bearers) {
      const absl::Status status = Call(authorization, rpc);
      EXPECT_EQ(status.code(), code) << row.name << " with \"" << authorization << "\": " << status;
    }
    // With mutual TLS required, a credential alone (no verified client certificate) is not enough.
    const absl::Status no_certificate = Call(Bearer(row.own), row.rpc(s.mutual_tls->stub.get()));
    EXPECT_EQ(no_certificate.code(), Code::kUnauthenticated) << row.name << ": " << no_certificate;
    EXPECT_THAT(std::string(no_certificate.message()), HasSubstr("TLS client certificate")) << row.name;
  }
}

TEST_F(CoordinatorServiceTest, RegisterWorkerTakesAJoinTokenOrTheWorkersOwnCredential) {
  const ServiceSuite& s = suite();
  EXPECT_EQ(Register("").status().code(), Code::kUnauthenticated);
  EXPECT_EQ(Register("Bearer not-a-token").status().code(), Code::kUnauthenticated);
  EXPECT_EQ(Register(Bearer(kClientToken)).status().code(), Code::kPermissionDenied);
  // A join token makes a new worker, whatever id it claims.
  absl::StatusOr<Worker> joined = Register(Bearer(kJoinToken), s.a.id);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_NE(joined->id, s.a.id);
  EXPECT_FALSE(joined->credential.empty());
  // A credential keeps its worker's id, in a new incarnation; it cannot act as another.
  absl::StatusOr<Worker> rejoined = Register(Bearer(s.rejoining.credential), s.rejoining.id);
  ASSERT_TRUE(rejoined.ok()) << rejoined.status();
  EXPECT_EQ(rejoined->id, s.rejoining.id);
  EXPECT_GT(rejoined->incarnation, s.rejoining.incarnation);
  EXPECT_EQ(Register(Bearer(s.rejoining.credential), s.a.id).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(Register(Bearer(s.revoked.credential), s.revoked.id).status().code(), Code::kPermissionDenied);

  // With mutual TLS required, neither a join token nor a credential is enough alone.
  for (const std::string& token : {std::string(kJoinToken), s.rejoining.credential}) {
    v1::RegisterWorkerResponse response;
    const absl::Status status = Call(Bearer(token), [&](grpc::ClientContext* context) {
      return s.mutual_tls->stub->RegisterWorker(context, TestWorkerRequest(), &response);
    });
    EXPECT_EQ(status.code(), Code::kUnauthenticated) << status;
  }
}

}  // namespace
}  // namespace slimfit::server
