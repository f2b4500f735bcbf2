#include "client/coordinator_client.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "base/flags.h"
#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Parses `args` with the coordinator flags alone and resolves them.
absl::StatusOr<CoordinatorOptions> Resolve(std::vector<std::string> args) {
  CoordinatorOptions options;
  base::FlagSet flags("status", "slimfit status", "");
  AddCoordinatorFlags(flags, &options);
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (absl::Status s = ResolveCoordinatorOptions(flags, &options); !s.ok()) return s;
  return options;
}

class CoordinatorClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv(kCoordinatorEnv);
    unsetenv(kTokenEnv);
  }
  void TearDown() override {
    unsetenv(kCoordinatorEnv);
    unsetenv(kTokenEnv);
  }

  std::unique_ptr<CoordinatorClient> Connect(const std::string& address, const std::string& token,
                                             double timeout_seconds = 5) {
    CoordinatorOptions options;
    options.coordinator = address;
    options.token = token;
    options.timeout_seconds = timeout_seconds;
    absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // GetJob of "job-1" through `client`.
  static absl::Status GetJob(const CoordinatorClient& client,
                             Idempotency idempotency = Idempotency::kIdempotent) {
    v1::GetJobRequest request;
    request.set_job_id("job-1");
    v1::Job job;
    return client.Call("GetJob", idempotency, [&](grpc::ClientContext* context) {
      return client.stub().GetJob(context, request, &job);
    });
  }
};

TEST_F(CoordinatorClientTest, DefaultsComeFromTheEnvironmentThenTheBuiltIn) {
  absl::StatusOr<CoordinatorOptions> options = Resolve({});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->coordinator, "127.0.0.1:50051");
  EXPECT_EQ(options->token, "");
  EXPECT_EQ(options->timeout_seconds, 30);
  EXPECT_FALSE(options->json);

  setenv(kCoordinatorEnv, "coord.example:7000", 1);
  setenv(kTokenEnv, "from-env", 1);
  options = Resolve({});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->coordinator, "coord.example:7000");
  EXPECT_EQ(options->token, "from-env");

  options = Resolve({"--coordinator=[::1]:9", "--token=flag", "--timeout=2.5", "--json"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->coordinator, "[::1]:9");
  EXPECT_EQ(options->token, "flag");
  EXPECT_EQ(options->timeout_seconds, 2.5);
  EXPECT_TRUE(options->json);
}

TEST_F(CoordinatorClientTest, RejectsBadAddressesAndTimeouts) {
  absl::StatusOr<CoordinatorOptions> options = Resolve({"--coordinator=nohost"});
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(options.status()), HasSubstr("--coordinator: \"nohost\" is not host:port"));

  setenv(kCoordinatorEnv, "host:0", 1);
  options = Resolve({});
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(options.status()), HasSubstr("SLIMFIT_COORDINATOR"));

  options = Resolve({"--coordinator=h:1", "--timeout=0"});
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(options.status()), HasSubstr("--timeout=0"));
}

TEST_F(CoordinatorClientTest, HelpNeverShowsTheToken) {
  setenv(kTokenEnv, "s3cret-token", 1);
  CoordinatorOptions options;
  base::FlagSet flags("status", "slimfit status", "");
  AddCoordinatorFlags(flags, &options);
  const std::string help = flags.Help();
  EXPECT_THAT(help, Not(HasSubstr("s3cret-token")));
  EXPECT_THAT(help, HasSubstr("$SLIMFIT_TOKEN"));
  EXPECT_THAT(help, HasSubstr("$SLIMFIT_COORDINATOR, else 127.0.0.1:50051"));
}

TEST_F(CoordinatorClientTest, SendsTheTokenAsBearerMetadata) {
  std::unique_ptr<FakeCoordinator> fake = FakeCoordinator::Start();
  fake->get_job = [](const v1::GetJobRequest& request, v1::Job* job) {
    job->set_job_id(request.job_id());
    return grpc::Status::OK;
  };
  ASSERT_TRUE(GetJob(*Connect(fake->address(), "tok-123")).ok());
  ASSERT_TRUE(GetJob(*Connect(fake->address(), "")).ok());
  EXPECT_THAT(fake->calls().authorizations, ElementsAre("Bearer tok-123", ""));
}

TEST_F(CoordinatorClientTest, UnreachableCoordinatorNamesTheAddress) {
  // Nothing listens on port 1 of the loopback interface.
  const absl::Time start = absl::Now();
  const absl::Status status = GetJob(*Connect("127.0.0.1:1", "tok"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Message(status), StartsWith("cannot reach the coordinator at 127.0.0.1:1 (GetJob: "));
  EXPECT_THAT(Message(status), HasSubstr("--coordinator"));
  // Retried, but briefly.
  EXPECT_GE(absl::Now() - start, CoordinatorClient::kFirstRetryPause * 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(CoordinatorClientTest, RetriesIdempotentCallsOnUnavailable) {
  std::unique_ptr<FakeCoordinator> fake = FakeCoordinator::Start();
  int calls = 0;
  fake->get_job = [&calls](const v1::GetJobRequest&, v1::Job* job) {
    if (++calls < CoordinatorClient::kAttempts) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator starting");
    }
    job->set_job_id("job-1");
    return grpc::Status::OK;
  };
  std::unique_ptr<CoordinatorClient> client = Connect(fake->address(), "tok");
  ASSERT_TRUE(GetJob(*client).ok());
  EXPECT_EQ(fake->calls().get_job.size(), static_cast<size_t>(CoordinatorClient::kAttempts));

  // Sent once: the server's own UNAVAILABLE comes back as it is (the coordinator was reached).
  calls = 0;
  const absl::Status once = GetJob(*client, Idempotency::kOnce);
  EXPECT_EQ(once.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Message(once), "GetJob: coordinator starting");
  EXPECT_EQ(fake->calls().get_job.size(), static_cast<size_t>(CoordinatorClient::kAttempts) + 1);
}

TEST_F(CoordinatorClientTest, CodesPassThroughWithTheRpcName) {
  std::unique_ptr<FakeCoordinator> fake = FakeCoordinator::Start();
  fake->get_job = [](const v1::GetJobRequest& request, v1::Job*) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + request.job_id() + " not found");
  };
  const absl::Status status = GetJob(*Connect(fake->address(), "tok"));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(status), "GetJob: job job-1 not found");
  EXPECT_EQ(fake->calls().get_job.size(), 1u);  // not retried
}

TEST_F(CoordinatorClientTest, UnauthenticatedWithoutATokenSaysHowToGiveOne) {
  std::unique_ptr<FakeCoordinator> fake = FakeCoordinator::Start();
  fake->get_job = [](const v1::GetJobRequest&, v1::Job*) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "token missing or wrong");
  };
  absl::Status status = GetJob(*Connect(fake->address(), ""));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(Message(status), HasSubstr("pass --token or set $SLIMFIT_TOKEN"));
  status = GetJob(*Connect(fake->address(), "wrong"));
  EXPECT_EQ(Message(status), "GetJob: token missing or wrong");
}

TEST_F(CoordinatorClientTest, UnaryCallsHaveADeadline) {
  std::unique_ptr<FakeCoordinator> fake = FakeCoordinator::Start();
  int calls = 0;
  fake->get_job = [&calls](const v1::GetJobRequest&, v1::Job*) {
    if (++calls > 1) absl::SleepFor(absl::Milliseconds(800));
    return grpc::Status::OK;
  };
  std::unique_ptr<CoordinatorClient> client = Connect(fake->address(), "tok", /*timeout_seconds=*/0.3);
  ASSERT_TRUE(GetJob(*client).ok());  // connected
  const absl::Status status = GetJob(*client);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Message(status), StartsWith("GetJob: "));
}

}  // namespace
}  // namespace slimfit::client
