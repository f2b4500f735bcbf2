#include "server/worker_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/test_util.h"
#include "server/test_worker_request.h"

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;

v1::RegisterWorkerRequest Request(const std::string& id = "") {
  v1::RegisterWorkerRequest request = TestWorkerRequest();
  request.set_worker_id(id);
  return request;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *StateStore::Open(testing_util::TempPath(
        absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db")));
    RegistryOptions options;
    options.heartbeat_interval = absl::Milliseconds(10);
    options.lost_after = absl::Milliseconds(100);
    options.clock = &clock_;
    registry_ = *WorkerRegistry::Create(store_.get(), options);
  }
  base::ManualClock clock_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
};

TEST_F(WorkerRegistryTest, LifecycleAndIncarnations) {
  absl::StatusOr<v1::RegisterWorkerResponse> first = registry_->Register(Request(), std::nullopt);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->incarnation(), 1u);
  EXPECT_EQ(registry_->LiveWorkers({}).size(), 1u);

  v1::HeartbeatRequest heartbeat;
  heartbeat.set_worker_id(first->worker_id());
  heartbeat.set_incarnation(1);
  heartbeat.set_state(v1::WORKER_STATE_BUSY);
  EXPECT_TRUE(registry_->Heartbeat(heartbeat).ok());

  // Registering again with the id: a new incarnation; the old one is superseded.
  absl::StatusOr<v1::RegisterWorkerResponse> second =
      registry_->Register(Request(first->worker_id()), first->worker_id());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->worker_id(), first->worker_id());
  EXPECT_EQ(second->incarnation(), 2u);
  EXPECT_EQ(registry_->Heartbeat(heartbeat).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(registry_->IsServing(first->worker_id(), 1));
  EXPECT_TRUE(registry_->IsServing(first->worker_id(), 2));
  v1::HeartbeatRequest draining;
  draining.set_worker_id(first->worker_id());
  draining.set_incarnation(2);
  draining.set_state(v1::WORKER_STATE_DRAINING);
  EXPECT_TRUE(registry_->Heartbeat(draining).ok());
  EXPECT_TRUE(registry_->IsServing(first->worker_id(), 2));
  EXPECT_FALSE(registry_->IsLive(first->worker_id(), 2));

  // Silence makes it LOST (only beyond lost_after); a heartbeat revives it.
  clock_.Advance(absl::Milliseconds(40));
  EXPECT_TRUE(registry_->ExpireSilentWorkers().empty());
  clock_.Advance(absl::Milliseconds(40));
  EXPECT_TRUE(registry_->ExpireSilentWorkers().empty());
  EXPECT_TRUE(registry_->IsServing(first->worker_id(), 2));  // DRAINING, not yet LOST
  clock_.Advance(absl::Milliseconds(40));
  EXPECT_EQ(registry_->ExpireSilentWorkers(), std::vector<std::string>{first->worker_id()});
  EXPECT_TRUE(registry_->LiveWorkers({}).empty());
  heartbeat.set_incarnation(2);
  heartbeat.set_state(v1::WORKER_STATE_IDLE);
  EXPECT_TRUE(registry_->Heartbeat(heartbeat).ok());
  EXPECT_EQ(registry_->LiveCount(), 1);

  v1::DeregisterWorkerRequest leave;
  leave.set_worker_id(first->worker_id());
  leave.set_incarnation(2);
  EXPECT_TRUE(registry_->Deregister(leave).ok());
  EXPECT_TRUE(registry_->Deregister(leave).ok());  // idempotent
  EXPECT_EQ(registry_->LiveCount(), 0);
  EXPECT_EQ(registry_->List(false).size(), 0u);
  EXPECT_EQ(registry_->List(true).size(), 1u);
}

// A coordinator stopped (SIGSTOP, a suspended VM) reads no heartbeats; when it resumes, the time it
// was away must not make every worker LOST (scripts/chaos.sh found every shard in flight cancelled
// after each SIGCONT). A worker that stays silent afterwards is still LOST, lost_after later.
TEST_F(WorkerRegistryTest, SilenceWhileTheCoordinatorWasStoppedDoesNotCount) {
  RegistryOptions options;
  options.lost_after = absl::Seconds(100);
  options.clock = &clock_;
  std::unique_ptr<WorkerRegistry> registry = *WorkerRegistry::Create(store_.get(), options);
  absl::StatusOr<v1::RegisterWorkerResponse> worker = registry->Register(Request(), std::nullopt);
  ASSERT_TRUE(worker.ok()) << worker.status();

  // Sweeps every 40 s (less than lost_after / 2), then none for an hour, then every 40 s again.
  clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(registry->ExpireSilentWorkers().empty());
  clock_.Advance(absl::Hours(1));
  EXPECT_TRUE(registry->ExpireSilentWorkers().empty());
  EXPECT_TRUE(registry->IsLive(worker->worker_id(), 1));
  // Silent for 10 s before the gap and 40, then 80 s after it: still live.
  clock_.Advance(absl::Seconds(40));
  EXPECT_TRUE(registry->ExpireSilentWorkers().empty());
  clock_.Advance(absl::Seconds(40));
  EXPECT_TRUE(registry->ExpireSilentWorkers().empty());
  // 130 s of silence while the coordinator was there to hear: LOST.
  clock_.Advance(absl::Seconds(40));
  EXPECT_EQ(registry->ExpireSilentWorkers(), std::vector<std::string>{worker->worker_id()});
  EXPECT_FALSE(registry->IsLive(worker->worker_id(), 1));
}

// The registry calls workers through stubs its factory makes from the advertised address; a
// factory's refusal refuses the registration, with its code.
TEST_F(WorkerRegistryTest, StubsComeFromTheFactory) {
  RegistryOptions options;
  options.clock = &clock_;
  std::vector<std::string> addresses;
  const std::shared_ptr<v1::Worker::StubInterface> made =
      v1::Worker::NewStub(grpc::CreateChannel("localhost:1", grpc::InsecureChannelCredentials()));
  options.stub_factory =
      [&](const std::string& address) -> absl::StatusOr<std::shared_ptr<v1::Worker::StubInterface>> {
    addresses.push_back(address);
    if (address == "nowhere") return absl::InvalidArgumentError("no such address");
    return made;
  };
  std::unique_ptr<WorkerRegistry> registry = *WorkerRegistry::Create(store_.get(), options);
  const v1::RegisterWorkerRequest request = Request();
  absl::StatusOr<v1::RegisterWorkerResponse> worker = registry->Register(request, std::nullopt);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(addresses, std::vector<std::string>{request.advertise_address()});
  ASSERT_TRUE(registry->Find(worker->worker_id()).has_value());
  EXPECT_EQ(registry->Find(worker->worker_id())->stub, made);
  // Its registration time is the clock's.
  EXPECT_EQ(registry->Info(worker->worker_id())->registered_at().seconds(),
            absl::ToUnixSeconds(clock_.Now()));

  v1::RegisterWorkerRequest elsewhere = Request();
  elsewhere.set_advertise_address("nowhere");
  EXPECT_EQ(registry->Register(elsewhere, std::nullopt).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry->LiveCount(), 1);
}

TEST_F(WorkerRegistryTest, IdsSurviveACoordinatorRestart) {
  absl::StatusOr<v1::RegisterWorkerResponse> first = registry_->Register(Request(), std::nullopt);
  ASSERT_TRUE(first.ok());
  RegistryOptions options;
  std::unique_ptr<WorkerRegistry> restarted = *WorkerRegistry::Create(store_.get(), options);
  // Heartbeats of the old process are unknown until it registers again with its id.
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_worker_id(first->worker_id());
  heartbeat.set_incarnation(1);
  EXPECT_EQ(restarted->Heartbeat(heartbeat).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<v1::RegisterWorkerResponse> again =
      restarted->Register(Request(first->worker_id()), restarted->WorkerOfCredential(first->credential()));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->incarnation(), 2u);
  EXPECT_EQ(restarted->Register(Request("w-unknown"), std::string("w-unknown")).status().code(),
            absl::StatusCode::kNotFound);
}

// Many workers registering at once (a fleet coming up together) each get their own id, and every
// id is durable when its registration returns.
TEST_F(WorkerRegistryTest, ConcurrentRegistrationsAreAllDurable) {
  constexpr int kWorkers = 32;
  std::vector<absl::StatusOr<v1::RegisterWorkerResponse>> responses(kWorkers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWorkers; ++i) {
    threads.emplace_back([&, i] { responses[i] = registry_->Register(Request(), std::nullopt); });
  }
  for (std::thread& thread : threads) thread.join();
  std::set<std::string> ids;
  for (const auto& response : responses) {
    ASSERT_TRUE(response.ok()) << response.status();
    ids.insert(response->worker_id());
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kWorkers));
  EXPECT_EQ(registry_->LiveCount(), kWorkers);
  // A restarted coordinator knows each one: it may register again with its credential.
  std::unique_ptr<WorkerRegistry> restarted = *WorkerRegistry::Create(store_.get(), RegistryOptions());
  for (const auto& response : responses) {
    EXPECT_EQ(restarted->WorkerOfCredential(response->credential()), response->worker_id());
    absl::StatusOr<v1::RegisterWorkerResponse> again =
        restarted->Register(Request(response->worker_id()), response->worker_id());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->incarnation(), 2u);
  }
}

TEST_F(WorkerRegistryTest, RejectsBadRegistrationsAndFiltersByConstraints) {
  v1::RegisterWorkerRequest bad = Request();
  bad.set_memory_budget_bytes(0);
  EXPECT_THAT(registry_->Register(bad, std::nullopt).status().message(), HasSubstr("memory_budget_bytes"));
  bad = Request();
  bad.set_device("tpu");
  EXPECT_THAT(registry_->Register(bad, std::nullopt).status().message(), HasSubstr("device"));
  bad = Request();
  bad.set_advertise_address("nowhere");
  EXPECT_THAT(registry_->Register(bad, std::nullopt).status().message(), HasSubstr("advertise_address"));
  bad = Request();
  bad.mutable_profile()->set_flops_per_second(-1);
  EXPECT_THAT(registry_->Register(bad, std::nullopt).status().message(), HasSubstr("profile"));

  ASSERT_TRUE(registry_->Register(Request(), std::nullopt).ok());
  v1::DeviceConstraints constraints;
  constraints.set_min_memory_bytes(int64_t{128} << 20);
  EXPECT_TRUE(registry_->LiveWorkers(constraints).empty());
  constraints.set_min_memory_bytes(0);
  constraints.add_device_kinds("cuda");
  EXPECT_TRUE(registry_->LiveWorkers(constraints).empty());
  constraints.add_device_kinds("cpu");
  EXPECT_EQ(registry_->LiveWorkers(constraints).size(), 1u);
}

v1::LocalDataset Announced(const std::string& name) {
  v1::LocalDataset dataset;
  dataset.set_name(name);
  dataset.set_tokens(1000);
  dataset.set_documents(12);
  dataset.set_sha256(std::string(64, 'a'));
  dataset.set_content_type("text/plain");
  dataset.set_max_token(200);
  return dataset;
}

TEST_F(WorkerRegistryTest, LocalDatasetsAreListedAsAnnouncedAndCheckedFirst) {
  v1::RegisterWorkerRequest request = Request();
  *request.add_local_datasets() = Announced("notes");
  *request.add_local_datasets() = Announced("mail");
  absl::StatusOr<v1::RegisterWorkerResponse> registered = registry_->Register(request, std::nullopt);
  ASSERT_TRUE(registered.ok()) << registered.status();
  std::vector<v1::WorkerInfo> listed = registry_->List(false);
  ASSERT_EQ(listed.size(), 1u);
  ASSERT_EQ(listed[0].local_datasets_size(), 2);
  EXPECT_EQ(listed[0].local_datasets(0).SerializeAsString(), Announced("notes").SerializeAsString());
  EXPECT_EQ(listed[0].local_datasets(1).name(), "mail");

  // A later incarnation announces what it holds now.
  v1::RegisterWorkerRequest again = Request(registered->worker_id());
  ASSERT_TRUE(registry_->Register(again, registered->worker_id()).ok());
  EXPECT_EQ(registry_->List(false)[0].local_datasets_size(), 0);

  v1::RegisterWorkerRequest bad = Request();
  *bad.add_local_datasets() = Announced("notes");
  bad.mutable_local_datasets(0)->set_documents(1001);
  EXPECT_THAT(registry_->Register(bad, std::nullopt).status().message(),
              HasSubstr("local_datasets[0] (notes): documents: expected 1 to 1000"));
  EXPECT_EQ(registry_->List(true).size(), 1u);  // nothing registered
}

TEST_F(WorkerRegistryTest, AJoinGetsACredentialThatIdentifiesOnlyItsWorker) {
  absl::StatusOr<v1::RegisterWorkerResponse> a = registry_->Register(Request(), std::nullopt);
  absl::StatusOr<v1::RegisterWorkerResponse> b = registry_->Register(Request(), std::nullopt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->worker_id(), b->worker_id());
  EXPECT_FALSE(a->credential().empty());
  EXPECT_NE(a->credential(), b->credential());
  EXPECT_FALSE(a->coordinator_token().empty());
  EXPECT_EQ(registry_->WorkerOfCredential(a->credential()), a->worker_id());
  EXPECT_EQ(registry_->WorkerOfCredential("wc-guess"), std::nullopt);
  // The coordinator presents the incarnation's token to the worker.
  EXPECT_EQ(registry_->Find(a->worker_id())->call_token, a->coordinator_token());
  // With its credential a worker keeps its id (no new credential) and gets a new coordinator token;
  // it cannot claim another id.
  absl::StatusOr<v1::RegisterWorkerResponse> again =
      registry_->Register(Request(a->worker_id()), a->worker_id());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->worker_id(), a->worker_id());
  EXPECT_TRUE(again->credential().empty());
  EXPECT_NE(again->coordinator_token(), a->coordinator_token());
  EXPECT_EQ(registry_->Register(Request(b->worker_id()), a->worker_id()).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A join token that names an existing id still makes a new worker: a join cannot take an id over.
  absl::StatusOr<v1::RegisterWorkerResponse> claim =
      registry_->Register(Request(a->worker_id()), std::nullopt);
  ASSERT_TRUE(claim.ok());
  EXPECT_NE(claim->worker_id(), a->worker_id());
}

TEST_F(WorkerRegistryTest, RevocationIsDurableAndFinal) {
  absl::StatusOr<v1::RegisterWorkerResponse> worker = registry_->Register(Request(), std::nullopt);
  ASSERT_TRUE(worker.ok());
  absl::StatusOr<v1::WorkerInfo> revoked = registry_->Revoke(worker->worker_id(), "lost laptop");
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  EXPECT_EQ(revoked->state(), v1::WORKER_STATE_REVOKED);
  EXPECT_EQ(revoked->revoked_reason(), "lost laptop");
  EXPECT_FALSE(registry_->IsServing(worker->worker_id(), 1));
  EXPECT_TRUE(registry_->LiveWorkers({}).empty());
  EXPECT_EQ(registry_->CheckNotRevoked(worker->worker_id()).code(), absl::StatusCode::kPermissionDenied);
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_worker_id(worker->worker_id());
  heartbeat.set_incarnation(1);
  heartbeat.set_state(v1::WORKER_STATE_IDLE);
  EXPECT_EQ(registry_->Heartbeat(heartbeat).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry_->Revoke("w-none", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry_->Revoke(worker->worker_id(), "again").ok());  // idempotent: the first reason stays
  EXPECT_EQ(registry_->List(false).size(), 0u);

  // After a coordinator restart: still revoked, listed, and its credential cannot register.
  std::unique_ptr<WorkerRegistry> restarted = *WorkerRegistry::Create(store_.get(), RegistryOptions());
  const std::optional<std::string> holder = restarted->WorkerOfCredential(worker->credential());
  ASSERT_EQ(holder, worker->worker_id());
  absl::Status refused = restarted->Register(Request(worker->worker_id()), holder).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("lost laptop"));
  std::vector<v1::WorkerInfo> listed = restarted->List(true);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state(), v1::WORKER_STATE_REVOKED);
  EXPECT_EQ(listed[0].revoked_reason(), "lost laptop");
}

TEST_F(WorkerRegistryTest, QuarantinesAreShownUntilTheJobEnds) {
  absl::StatusOr<v1::RegisterWorkerResponse> worker = registry_->Register(Request(), std::nullopt);
  registry_->AddQuarantine(worker->worker_id(), "job-1", "3 results failed validation");
  std::optional<v1::WorkerInfo> info = registry_->Info(worker->worker_id());
  ASSERT_EQ(info->quarantines_size(), 1);
  EXPECT_EQ(info->quarantines(0).job_id(), "job-1");
  EXPECT_EQ(info->quarantines(0).reason(), "3 results failed validation");
  registry_->ClearJob("job-1");
  EXPECT_EQ(registry_->Info(worker->worker_id())->quarantines_size(), 0);
}

TEST_F(WorkerRegistryTest, JobPlansKeepTheLastMeasurement) {
  absl::StatusOr<v1::RegisterWorkerResponse> worker = registry_->Register(Request(), std::nullopt);
  v1::WorkerJobPlan plan;
  plan.set_job_id("job-1");
  plan.set_predicted_tokens_per_second(100);
  plan.set_measured_tokens_per_second(90);
  registry_->SetJobPlan(worker->worker_id(), plan);
  plan.clear_measured_tokens_per_second();
  plan.set_predicted_tokens_per_second(110);
  registry_->SetJobPlan(worker->worker_id(), plan);
  std::optional<v1::WorkerInfo> info = registry_->Info(worker->worker_id());
  ASSERT_EQ(info->plans_size(), 1);
  EXPECT_EQ(info->plans(0).predicted_tokens_per_second(), 110);
  EXPECT_EQ(info->plans(0).measured_tokens_per_second(), 90);
  registry_->ClearJob("job-1");
  EXPECT_EQ(registry_->Info(worker->worker_id())->plans_size(), 0);
}

}  // namespace
}  // namespace slimfit::server
