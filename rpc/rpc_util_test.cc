#include "rpc/rpc_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace slimfit::rpc {
namespace {

using ::testing::HasSubstr;

TEST(RpcUtilTest, ErrorDetailSurvivesTheEdgeAsAPayload) {
  v1::ErrorDetail detail;
  detail.set_required_bytes(100);
  detail.set_budget_bytes(50);
  absl::Status status = AttachErrorDetail(absl::ResourceExhaustedError("plan needs 100 B"), detail);
  std::optional<v1::ErrorDetail> back = ErrorDetailOf(status);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->required_bytes(), 100);
  grpc::Status edge = ToGrpcStatus(status);
  EXPECT_EQ(edge.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(edge.error_message(), "plan needs 100 B");
  absl::Status client = FromGrpcStatus(edge, "ComputeGradient");
  EXPECT_EQ(client.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(client.message(), "ComputeGradient: plan needs 100 B");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "x").ok());
  EXPECT_FALSE(ErrorDetailOf(absl::InternalError("no detail")).has_value());
}

TEST(RpcUtilTest, ValidateAddress) {
  EXPECT_TRUE(ValidateAddress("127.0.0.1:50051", "--listen", false).ok());
  EXPECT_TRUE(ValidateAddress("[::1]:1", "--listen", false).ok());
  EXPECT_TRUE(ValidateAddress("localhost:0", "--listen", true).ok());
  EXPECT_THAT(ValidateAddress("localhost:0", "--advertise", false).message(), HasSubstr("--advertise"));
  EXPECT_FALSE(ValidateAddress("localhost", "--listen", false).ok());
  EXPECT_FALSE(ValidateAddress("host:70000", "--listen", false).ok());
  EXPECT_FALSE(ValidateAddress("host:abc", "--listen", false).ok());
  EXPECT_FALSE(ValidateAddress(":80", "--listen", false).ok());
}

}  // namespace
}  // namespace slimfit::rpc
