// End to end, the service opened to devices of different owners: mutual TLS between every daemon,
// each refused peer (plaintext, another CA, a foreign or expired certificate), per-worker
// credentials that act only as their worker, revocation mid-job that survives a restart, and client
// tokens rotated without downtime.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/certificates.h"
#include "base/files.h"
#include "base/test_util.h"
#include "rpc/rpc_util.h"
#include "rpc/transport_security.h"
#include "tests/cluster.h"
#include "tests/e2e_support.h"

namespace slimfit {
namespace {

using ::testing::HasSubstr;
using testing_util::Cluster;
using testing_util::ClusterOptions;
using testing_util::kClientToken;
using testing_util::kWorkerToken;

// ListWorkers as `token` over `credentials` (the status on failure).
absl::StatusOr<v1::ListWorkersResponse> ListWorkers(const Cluster& cluster, const std::string& token,
                                                    std::shared_ptr<grpc::ChannelCredentials> credentials,
                                                    bool include_gone = false) {
  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(cluster.address(), std::move(credentials)));
  auto context = rpc::MakeClientContext(token, std::chrono::seconds(10));
  v1::ListWorkersRequest request;
  request.set_include_gone(include_gone);
  v1::ListWorkersResponse response;
  grpc::Status status = stub->ListWorkers(context.get(), request, &response);
  if (!status.ok()) return rpc::FromGrpcStatus(status, "ListWorkers", context.get());
  return response;
}

std::string Credential(const Cluster& cluster, int worker) {
  absl::StatusOr<std::string> text = base::ReadFileToString(cluster.worker_state_dir(worker) + "/credential");
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? text->substr(0, text->find('\n')) : "";
}

std::string WorkerId(const Cluster& cluster, int worker) {
  absl::StatusOr<std::string> text = base::ReadFileToString(cluster.worker_state_dir(worker) + "/worker_id");
  return text.ok() ? text->substr(0, text->find('\n')) : "";
}

TEST(TrustEndToEndTest, MutualTlsJobEqualsSingleProcess) {
  Cluster cluster("mtls", ClusterOptions{.tls = true});
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (const char* budget : {"700KiB", "4MiB"})
    ASSERT_TRUE(cluster.StartWorker(budget).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = testing_util::Corpus(16000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const v1::JobSpec spec = testing_util::Spec(*dataset, 32, 64, 128, 8, 3);
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, job->job_id(), spec, text, std::string("\n\n")),
            1e-5);
  EXPECT_THAT(cluster.Logs(), HasSubstr("with mutual TLS"));
}

TEST(TrustEndToEndTest, TlsRefusesPlaintextOtherCasAndForeignOrExpiredCertificates) {
  Cluster cluster("tls_refusals", ClusterOptions{.tls = true});
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  // A client verifying against the right CA gets in with its token.
  ASSERT_TRUE(ListWorkers(cluster, kClientToken, cluster.ClientCredentials()).ok());
  // Plaintext against the TLS port, and a client trusting another CA: UNAVAILABLE, with a hint.
  EXPECT_EQ(ListWorkers(cluster, kClientToken, nullptr).status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<base::KeyAndCertificate> other_ca =
      base::MakeCertificateAuthority("other CA", absl::Now() - absl::Hours(1), absl::Hours(24));
  ASSERT_TRUE(other_ca.ok());
  absl::Status wrong_ca = ListWorkers(cluster, kClientToken,
                                      rpc::ChannelCredentials(rpc::TlsMaterial{"", "", other_ca->cert_pem}))
                              .status();
  EXPECT_EQ(wrong_ca.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(wrong_ca.message()), HasSubstr("--tls_ca"));

  // Workers with a certificate of another CA, or an expired one, never get in.
  base::CertificateRequest request;
  request.common_name = "intruder";
  request.ip_addresses = {"127.0.0.1"};
  absl::StatusOr<base::KeyAndCertificate> foreign = base::IssueCertificate(*other_ca, request);
  request.not_before = absl::Now() - absl::Hours(48);
  request.validity = absl::Hours(24);
  absl::StatusOr<base::KeyAndCertificate> expired = base::IssueCertificate(cluster.ca(), request);
  ASSERT_TRUE(foreign.ok() && expired.ok());
  testing_util::WorkerOptions foreign_worker;
  foreign_worker.certificate = *foreign;
  ASSERT_TRUE(cluster.StartWorker("4MiB", foreign_worker).ok()) << cluster.Logs();
  testing_util::WorkerOptions expired_worker;
  expired_worker.certificate = *expired;
  ASSERT_TRUE(cluster.StartWorker("4MiB", expired_worker).ok()) << cluster.Logs();
  absl::SleepFor(absl::Seconds(3));  // several registration attempts
  absl::StatusOr<v1::ListWorkersResponse> listed =
      ListWorkers(cluster, kClientToken, cluster.ClientCredentials(), true);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->workers_size(), 0) << cluster.Logs();
  EXPECT_THAT(cluster.Logs(), HasSubstr("signed this worker's certificate"));
  EXPECT_THAT(cluster.Logs(), HasSubstr("certificate verify failed"));  // the coordinator's side
}

TEST(TrustEndToEndTest, AWorkerActsOnlyAsItselfAndEachBearerOnlyInItsRole) {
  Cluster cluster("identity");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string credential = Credential(cluster, 0);
  ASSERT_FALSE(credential.empty());
  auto heartbeat_as = [&](const std::string& bearer, const std::string& worker_id) {
    auto context = rpc::MakeClientContext(bearer, std::chrono::seconds(10));
    v1::HeartbeatRequest request;
    request.set_worker_id(worker_id);
    request.set_incarnation(1);
    request.set_state(v1::WORKER_STATE_IDLE);
    v1::HeartbeatResponse response;
    return rpc::FromGrpcStatus(cluster.Stub()->Heartbeat(context.get(), request, &response), "Heartbeat");
  };
  EXPECT_TRUE(heartbeat_as(credential, WorkerId(cluster, 0)).ok());
  EXPECT_EQ(heartbeat_as(credential, WorkerId(cluster, 1)).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(heartbeat_as(kWorkerToken, WorkerId(cluster, 0)).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(heartbeat_as(kClientToken, WorkerId(cluster, 0)).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(heartbeat_as("wc-forged", WorkerId(cluster, 0)).code(), absl::StatusCode::kUnauthenticated);
  // A worker's credential and the join token are no client tokens.
  EXPECT_EQ(ListWorkers(cluster, credential, nullptr).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ListWorkers(cluster, kWorkerToken, nullptr).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(TrustEndToEndTest, RevokedMidJobItsShardsMoveAndItNeverComesBack) {
  Cluster cluster("revoke");
  testing_util::BusyJob busy;
  testing_util::StartJobAndFindBusyWorker(cluster, 4, &busy);
  ASSERT_GE(busy.busy_worker, 0);
  const std::string revoked_id = WorkerId(cluster, busy.busy_worker);
  {
    auto context = rpc::MakeClientContext(kClientToken, std::chrono::seconds(10));
    v1::RevokeWorkerRequest request;
    request.set_worker_id(revoked_id);
    request.set_reason("compromised");
    v1::WorkerInfo revoked;
    ASSERT_TRUE(cluster.Stub()->RevokeWorker(context.get(), request, &revoked).ok());
    EXPECT_EQ(revoked.state(), v1::WORKER_STATE_REVOKED);
  }
  // Its in-flight shard is reassigned and the job finishes on the other worker, exactly.
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(busy.job_id, absl::Seconds(180));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, busy.job_id, busy.spec, busy.text, std::nullopt),
            1e-5);
  // The revoked worker stopped (its heartbeat was refused), and a restart on its credential is refused.
  absl::StatusOr<int> exited = cluster.worker(busy.busy_worker).Wait(absl::Seconds(30));
  ASSERT_TRUE(exited.ok()) << exited.status() << cluster.Logs();
  EXPECT_EQ(*exited, 2);
  ASSERT_TRUE(cluster.RestartWorker(busy.busy_worker).ok());
  absl::StatusOr<int> refused = cluster.worker(busy.busy_worker).Wait(absl::Seconds(30));
  ASSERT_TRUE(refused.ok()) << cluster.Logs();
  EXPECT_EQ(*refused, 2);
  // Durable: after a coordinator restart the worker is still listed as revoked.
  cluster.coordinator().Signal(SIGKILL);
  (void)cluster.coordinator().Wait(absl::Seconds(10));
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  absl::StatusOr<v1::ListWorkersResponse> listed = ListWorkers(cluster, kClientToken, nullptr, true);
  ASSERT_TRUE(listed.ok()) << listed.status();
  bool found = false;
  for (const v1::WorkerInfo& worker : listed->workers()) {
    if (worker.worker_id() != revoked_id) continue;
    found = true;
    EXPECT_EQ(worker.state(), v1::WORKER_STATE_REVOKED);
    EXPECT_EQ(worker.revoked_reason(), "compromised");
  }
  EXPECT_TRUE(found) << listed->DebugString();
}

TEST(TrustEndToEndTest, ClientTokensRotateWithoutDowntime) {
  Cluster cluster("rotation");
  const std::string file = testing_util::WriteTempFile("rotation_tokens", "first-rotated-token\n");
  ASSERT_TRUE(cluster.StartCoordinator({absl::StrCat("--token_file=", file)}).ok()) << cluster.Logs();
  EXPECT_TRUE(ListWorkers(cluster, "first-rotated-token", nullptr).ok());
  EXPECT_EQ(ListWorkers(cluster, "second-rotated-token", nullptr).status().code(),
            absl::StatusCode::kUnauthenticated);
  // Both while clients move over, then only the new one.
  ASSERT_TRUE(base::WriteFileAtomically(file, "first-rotated-token\nsecond-rotated-token\n").ok());
  cluster.coordinator().Signal(SIGHUP);
  for (int i = 0; i < 100 && !ListWorkers(cluster, "second-rotated-token", nullptr).ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(ListWorkers(cluster, "second-rotated-token", nullptr).ok());
  EXPECT_TRUE(ListWorkers(cluster, "first-rotated-token", nullptr).ok());
  ASSERT_TRUE(base::WriteFileAtomically(file, "second-rotated-token\n").ok());
  cluster.coordinator().Signal(SIGHUP);
  for (int i = 0; i < 100 && ListWorkers(cluster, "first-rotated-token", nullptr).ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(ListWorkers(cluster, "first-rotated-token", nullptr).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(ListWorkers(cluster, "second-rotated-token", nullptr).ok());
  // The coordinator stayed up throughout.
  EXPECT_THAT(cluster.Logs(), HasSubstr("SIGHUP: re-read"));
}

}  // namespace
}  // namespace slimfit
