#include "worker/coordinator_link.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/device_profile_io.h"
#include "rpc/rpc_util.h"
#include "worker/test_coordinator.h"

namespace slimfit::worker {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "worker-secret";

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TestCoordinatorServer::Start(&coordinator_);
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Coordinator::NewStub(rpc::MakeChannel(server_->address()));
    absl::StatusOr<StateDir> state = StateDir::Open(testing_util::TempPath(
        std::string("link_") + ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    ASSERT_TRUE(state.ok()) << state.status();
    state_ = std::make_unique<StateDir>(*state);
    absl::StatusOr<planner::DeviceProfile> profile =
        planner::ReadDeviceProfile(testing_util::RunfilePath("client/testdata/tiny_cpu.profile"));
    ASSERT_TRUE(profile.ok()) << profile.status();
    identity_ = std::make_unique<WorkerIdentity>(kToken, "");
    ParameterCache::Options cache_options;
    cache_options.coordinator = stub_;
    cache_options.identity = identity_.get();
    cache_ = std::make_unique<ParameterCache>(cache_options);
    WorkerService::Options service_options;
    service_options.identity = identity_.get();
    service_options.profile = *profile;
    service_options.memory_budget_bytes = 64 << 20;
    service_options.cache = cache_.get();
    service_ = std::make_unique<WorkerService>(service_options);
    registration_.set_memory_budget_bytes(64 << 20);
    registration_.set_device("cpu");
    registration_.set_advertise_address("127.0.0.1:5555");
    registration_.set_threads(1);
    registration_.set_version(kWorkerVersion);
    *registration_.mutable_profile() = planner::DeviceProfileToProto(*profile);
  }

  // A link with the fixture's identity (a restarted worker reads the same credential), or with a
  // fresh identity holding `token` as its join token.
  std::unique_ptr<CoordinatorLink> MakeLink(const std::string& token = kToken) {
    CoordinatorLink::Options options;
    options.coordinator = stub_;
    options.coordinator_address = server_->address();
    if (token == kToken) {
      options.identity = identity_.get();
    } else {
      other_identities_.push_back(std::make_unique<WorkerIdentity>(token, ""));
      options.identity = other_identities_.back().get();
    }
    options.registration = registration_;
    options.state = state_.get();
    options.service = service_.get();
    options.cache = cache_.get();
    options.on_stop = [this](const absl::Status& status) {
      superseded_status_ = status;
      superseded_.Notify();
    };
    options.rpc_timeout = absl::Seconds(2);
    options.initial_backoff = absl::Milliseconds(20);
    options.max_backoff = absl::Milliseconds(100);
    return std::make_unique<CoordinatorLink>(options);
  }

  bool WaitForHeartbeats(size_t count) {
    return coordinator_.WaitFor([count](const TestCoordinator& c)
                                    ABSL_NO_THREAD_SAFETY_ANALYSIS { return c.heartbeat_count() >= count; },
                                absl::Seconds(10));
  }

  TestCoordinator coordinator_;
  std::unique_ptr<TestCoordinatorServer> server_;
  std::shared_ptr<v1::Coordinator::Stub> stub_;
  std::unique_ptr<StateDir> state_;
  std::unique_ptr<WorkerIdentity> identity_;
  std::vector<std::unique_ptr<WorkerIdentity>> other_identities_;
  std::unique_ptr<ParameterCache> cache_;
  std::unique_ptr<WorkerService> service_;
  v1::RegisterWorkerRequest registration_;
  absl::Notification superseded_;
  absl::Status superseded_status_;
};

TEST_F(CoordinatorLinkTest, RegistersStoresTheIdAndHeartbeats) {
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  ASSERT_TRUE(link->Register().ok());
  EXPECT_EQ(link->worker_id(), "w-0001");
  EXPECT_EQ(link->incarnation(), 1u);
  EXPECT_EQ(service_->worker_id(), "w-0001");
  EXPECT_EQ(state_->ReadWorkerId().value_or(""), "w-0001");
  const std::vector<v1::RegisterWorkerRequest> registrations = coordinator_.registrations();
  ASSERT_EQ(registrations.size(), 1u);
  EXPECT_EQ(registrations[0].worker_id(), "");
  EXPECT_EQ(registrations[0].advertise_address(), "127.0.0.1:5555");
  EXPECT_EQ(registrations[0].version(), "0.4.0");
  EXPECT_EQ(registrations[0].memory_budget_bytes(), 64 << 20);
  // The credential is kept (state directory and identity); the coordinator's token is accepted.
  EXPECT_EQ(state_->ReadCredential().value_or(""), "wc-w-0001");
  EXPECT_EQ(identity_->BearerForCoordinator(), "wc-w-0001");
  EXPECT_TRUE(identity_->AcceptsCoordinator(coordinator_.CoordinatorToken("w-0001")));

  link->StartHeartbeats();
  ASSERT_TRUE(WaitForHeartbeats(2));
  v1::HeartbeatRequest heartbeat = coordinator_.heartbeats().back();
  EXPECT_EQ(heartbeat.worker_id(), "w-0001");
  EXPECT_EQ(heartbeat.incarnation(), 1u);
  EXPECT_EQ(heartbeat.state(), v1::WORKER_STATE_IDLE);
  EXPECT_FALSE(heartbeat.has_current_work());

  // Draining is reported at once when asked.
  service_->StartDraining();
  link->HeartbeatNow();
  for (int i = 0; i < 100 && coordinator_.heartbeats().back().state() != v1::WORKER_STATE_DRAINING; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(coordinator_.heartbeats().back().state(), v1::WORKER_STATE_DRAINING);

  link->Stop();
  link->Stop();
  ASSERT_TRUE(link->Deregister("SIGTERM", absl::Seconds(5)).ok());
  const std::vector<v1::DeregisterWorkerRequest> left = coordinator_.deregistrations();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].worker_id(), "w-0001");
  EXPECT_EQ(left[0].incarnation(), 1u);
  EXPECT_EQ(left[0].reason(), "SIGTERM");
}

TEST_F(CoordinatorLinkTest, KeepsItsIdAcrossRestarts) {
  ASSERT_TRUE(MakeLink()->Register().ok());
  std::unique_ptr<CoordinatorLink> again = MakeLink();
  ASSERT_TRUE(again->Register().ok());
  EXPECT_EQ(again->worker_id(), "w-0001");
  EXPECT_EQ(again->incarnation(), 2u);
  EXPECT_EQ(coordinator_.registrations().back().worker_id(), "w-0001");
}

TEST_F(CoordinatorLinkTest, AnIdWithoutItsCredentialIsNotClaimed) {
  ASSERT_TRUE(state_->WriteWorkerId("w-lost").ok());
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  ASSERT_TRUE(link->Register().ok());
  EXPECT_EQ(link->worker_id(), "w-0001");
  EXPECT_EQ(state_->ReadWorkerId().value_or(""), "w-0001");
  const std::vector<v1::RegisterWorkerRequest> registrations = coordinator_.registrations();
  ASSERT_EQ(registrations.size(), 1u);
  EXPECT_EQ(registrations[0].worker_id(), "");  // joined: a join token cannot claim an id
}

TEST_F(CoordinatorLinkTest, ACredentialTheCoordinatorDoesNotKnowJoinsAgain) {
  ASSERT_TRUE(state_->WriteWorkerId("w-lost").ok());
  ASSERT_TRUE(state_->WriteCredential("wc-of-another-coordinator").ok());
  identity_->SetCredential("wc-of-another-coordinator");
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  ASSERT_TRUE(link->Register().ok());
  EXPECT_EQ(link->worker_id(), "w-0001");
  EXPECT_EQ(state_->ReadCredential().value_or(""), "wc-w-0001");
}

TEST_F(CoordinatorLinkTest, WithoutACredentialOrAJoinTokenThereIsNothingToRegisterWith) {
  absl::Status registered = MakeLink("")->Register();
  EXPECT_EQ(registered.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(registered.message(), HasSubstr("join token"));
}

TEST_F(CoordinatorLinkTest, RevokedWorkerStops) {
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  ASSERT_TRUE(link->Register().ok());
  link->StartHeartbeats();
  ASSERT_TRUE(WaitForHeartbeats(1));
  coordinator_.Revoke("w-0001");
  ASSERT_TRUE(superseded_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(superseded_status_.code(), absl::StatusCode::kPermissionDenied);
  link->Stop();
  EXPECT_EQ(MakeLink()->Register().code(), absl::StatusCode::kPermissionDenied);  // a restart is refused too
}

TEST_F(CoordinatorLinkTest, RetriesWhileTheCoordinatorIsUnavailable) {
  coordinator_.SetUnavailable(true);
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  absl::Status registered;
  std::thread registering([&] { registered = link->Register(); });
  absl::SleepFor(absl::Milliseconds(300));  // several attempts, refused
  EXPECT_EQ(coordinator_.registrations().size(), 0u);
  coordinator_.SetUnavailable(false);
  registering.join();
  EXPECT_TRUE(registered.ok()) << registered;
  EXPECT_EQ(link->worker_id(), "w-0001");
}

TEST_F(CoordinatorLinkTest, RetriesWhileNothingListensAndStopEndsTheWait) {
  server_->Shutdown();
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  absl::Status registered;
  std::thread registering([&] { registered = link->Register(); });
  absl::SleepFor(absl::Milliseconds(300));
  link->Stop();
  registering.join();
  EXPECT_EQ(registered.code(), absl::StatusCode::kCancelled) << registered;
}

TEST_F(CoordinatorLinkTest, WrongTokenIsNotRetried) {
  absl::Status registered = MakeLink("wrong")->Register();
  EXPECT_EQ(registered.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(registered.message(), HasSubstr("registering with the coordinator at"));
}

TEST_F(CoordinatorLinkTest, ForgottenWorkerRegistersAgainKeepingItsId) {
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  ASSERT_TRUE(link->Register().ok());
  link->StartHeartbeats();
  ASSERT_TRUE(WaitForHeartbeats(1));
  coordinator_.ForgetWorkers();
  ASSERT_TRUE(coordinator_.WaitFor([](const TestCoordinator& c)
                                       ABSL_NO_THREAD_SAFETY_ANALYSIS { return c.registration_count() >= 2; },
                                   absl::Seconds(10)));
  const size_t seen = coordinator_.heartbeats().size();
  ASSERT_TRUE(WaitForHeartbeats(seen + 1));
  EXPECT_EQ(coordinator_.registrations().back().worker_id(), "w-0001");
  EXPECT_EQ(link->worker_id(), "w-0001");
  EXPECT_EQ(link->incarnation(), 2u);
  EXPECT_EQ(coordinator_.heartbeats().back().incarnation(), 2u);
}

TEST_F(CoordinatorLinkTest, CoordinatorThatLostItsStateGivesANewId) {
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  ASSERT_TRUE(link->Register().ok());
  link->StartHeartbeats();
  ASSERT_TRUE(WaitForHeartbeats(1));
  coordinator_.SetUnavailable(true);  // restarting...
  absl::SleepFor(absl::Milliseconds(300));
  coordinator_.LoseState();  // ...and back without its records
  coordinator_.SetUnavailable(false);
  for (int i = 0; i < 500 && link->worker_id() == "w-0001"; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(link->worker_id(), "w-0002");
  EXPECT_EQ(state_->ReadWorkerId().value_or(""), "w-0002");
  EXPECT_EQ(service_->worker_id(), "w-0002");
  const size_t seen = coordinator_.heartbeats().size();
  ASSERT_TRUE(WaitForHeartbeats(seen + 1));
  EXPECT_EQ(coordinator_.heartbeats().back().worker_id(), "w-0002");
}

TEST_F(CoordinatorLinkTest, SupersededIncarnationStopsHeartbeats) {
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  ASSERT_TRUE(link->Register().ok());
  link->StartHeartbeats();
  ASSERT_TRUE(WaitForHeartbeats(1));
  coordinator_.Supersede("w-0001");
  ASSERT_TRUE(superseded_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(superseded_status_.code(), absl::StatusCode::kFailedPrecondition);
  const size_t seen = coordinator_.heartbeats().size();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(coordinator_.heartbeats().size(), seen);
  link->Stop();
}

TEST_F(CoordinatorLinkTest, FinishedJobsAreDroppedFromTheCache) {
  absl::StatusOr<performer::PerformerModel> model = performer::PerformerModel::Create(
      performer::ModelConfig{64, 16, 1, 2, 32}, performer::DType::kFloat32, at::kCPU, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  coordinator_.Publish("job-1", 1, *model);
  std::unique_ptr<CoordinatorLink> link = MakeLink();
  ASSERT_TRUE(link->Register().ok());  // fetching needs the credential
  ASSERT_TRUE(cache_->Get("job-1", 1, performer::DType::kFloat32).ok());
  link->StartHeartbeats();
  ASSERT_TRUE(WaitForHeartbeats(1));
  EXPECT_EQ(coordinator_.heartbeats().back().cached_parameter_versions().at("job-1"), 1u);
  coordinator_.FinishJob("job-1");
  for (int i = 0; i < 500 && !cache_->CachedVersions().empty(); ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(cache_->CachedVersions().empty());
}

}  // namespace
}  // namespace slimfit::worker
