#include "rpc/standard_services.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "proto/slimfit.grpc.pb.h"

namespace slimfit::rpc {
namespace {

using ::testing::Contains;

class StandardServicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EnableStandardServices();
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&worker_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  }
  void TearDown() override { server_->Shutdown(); }

  v1::Worker::Service worker_;  // every method UNIMPLEMENTED: only its name matters here
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(StandardServicesTest, HealthFollowsTheServingStatusOfEachService) {
  SetServing(server_.get(), {"slimfit.v1.Worker"}, false);
  absl::StatusOr<HealthStatus> starting = CheckHealth(channel_, "slimfit.v1.Worker", absl::Seconds(10));
  ASSERT_TRUE(starting.ok()) << starting.status();
  EXPECT_EQ(*starting, HealthStatus::kNotServing);
  absl::StatusOr<HealthStatus> overall = CheckHealth(channel_, "", absl::Seconds(10));
  ASSERT_TRUE(overall.ok()) << overall.status();
  EXPECT_EQ(*overall, HealthStatus::kNotServing);

  SetServing(server_.get(), {"slimfit.v1.Worker"}, true);
  EXPECT_EQ(*CheckHealth(channel_, "slimfit.v1.Worker", absl::Seconds(10)), HealthStatus::kServing);
  EXPECT_EQ(*CheckHealth(channel_, "", absl::Seconds(10)), HealthStatus::kServing);

  SetServing(server_.get(), {"slimfit.v1.Worker"}, false);  // draining
  EXPECT_EQ(*CheckHealth(channel_, "slimfit.v1.Worker", absl::Seconds(10)), HealthStatus::kNotServing);
}

TEST_F(StandardServicesTest, AnUnknownServiceIsNotFound) {
  absl::StatusOr<HealthStatus> unknown = CheckHealth(channel_, "slimfit.v1.Nothing", absl::Seconds(10));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
}

TEST_F(StandardServicesTest, ReflectionListsTheRegisteredServices) {
  absl::StatusOr<std::vector<std::string>> services = ListServicesByReflection(channel_, absl::Seconds(10));
  ASSERT_TRUE(services.ok()) << services.status();
  EXPECT_THAT(*services, Contains("slimfit.v1.Worker"));
  EXPECT_THAT(*services, Contains("grpc.health.v1.Health"));
}

TEST(StandardServicesClientTest, NothingListeningIsUnavailable) {
  auto channel = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  EXPECT_EQ(CheckHealth(channel, "", absl::Seconds(2)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ListServicesByReflection(channel, absl::Seconds(2)).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace slimfit::rpc
