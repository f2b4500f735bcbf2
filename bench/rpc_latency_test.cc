#include "bench/rpc_latency.h"

#include <grpcpp/grpcpp.h>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/slimfit.grpc.pb.h"
#include "rpc/rpc_util.h"

namespace slimfit::bench {
namespace {

using ::testing::ElementsAre;

TEST(NearestRankPercentileTest, IsTheSmallestValueWithEnoughBelowIt) {
  std::vector<double> values;
  for (int i = 1; i <= 100; ++i) values.push_back(i);
  EXPECT_EQ(NearestRankPercentile(values, 0.50), 50);
  EXPECT_EQ(NearestRankPercentile(values, 0.99), 99);
  EXPECT_EQ(NearestRankPercentile(values, 1.0), 100);
  EXPECT_EQ(NearestRankPercentile({7}, 0.99), 7);
  EXPECT_EQ(NearestRankPercentile({1, 2, 3}, 0.5), 2);
  EXPECT_EQ(NearestRankPercentile({}, 0.5), 0);
  // Few samples: the 99th percentile of 64 is the largest.
  std::vector<double> registrations(64, 1.0);
  registrations.back() = 250;
  EXPECT_EQ(NearestRankPercentile(registrations, 0.99), 250);
}

TEST(LatencyRecorderTest, SummarisesEachMethodWithItsErrors) {
  LatencyRecorder recorder;
  recorder.Record("Heartbeat", absl::Milliseconds(2), grpc::StatusCode::OK);
  recorder.Record("Heartbeat", absl::Milliseconds(4), grpc::StatusCode::OK);
  recorder.Record("Heartbeat", absl::Milliseconds(90), grpc::StatusCode::UNAVAILABLE);
  recorder.Record("GetJob", absl::Milliseconds(1), grpc::StatusCode::OK);
  EXPECT_THAT(recorder.Methods(), ElementsAre("GetJob", "Heartbeat"));
  LatencySummary heartbeats = recorder.Summary("Heartbeat");
  EXPECT_EQ(heartbeats.count, 3);
  EXPECT_EQ(heartbeats.errors, 1);
  EXPECT_EQ(heartbeats.errors_by_code.at("UNAVAILABLE"), 1);
  EXPECT_DOUBLE_EQ(heartbeats.p50_ms, 4);
  EXPECT_DOUBLE_EQ(heartbeats.p99_ms, 90);
  EXPECT_DOUBLE_EQ(heartbeats.max_ms, 90);
  EXPECT_EQ(recorder.Summary("ListWorkers").count, 0);
}

TEST(ShortMethodNameTest, DropsTheService) {
  EXPECT_EQ(ShortMethodName("/slimfit.v1.Coordinator/Heartbeat"), "Heartbeat");
  EXPECT_EQ(ShortMethodName("Heartbeat"), "Heartbeat");
}

// GetJob that takes 30 ms; job "missing" is NOT_FOUND.
class SlowCoordinator final : public v1::Coordinator::Service {
 public:
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request, v1::Job* response) override {
    absl::SleepFor(absl::Milliseconds(30));
    if (request->job_id() == "missing") return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    response->set_job_id(request->job_id());
    return grpc::Status::OK;
  }
};

TEST(TimedChannelTest, RecordsWhatTheCallerWaitedForEveryCall) {
  SlowCoordinator service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto recorder = std::make_shared<LatencyRecorder>();
  auto stub = v1::Coordinator::NewStub(MakeTimedChannel("127.0.0.1:" + std::to_string(port), recorder));
  const absl::Time started = absl::Now();
  for (const char* job : {"job-1", "job-2", "missing"}) {
    auto context = rpc::MakeClientContext("token", std::chrono::seconds(10));
    v1::GetJobRequest request;
    request.set_job_id(job);
    v1::Job response;
    (void)stub->GetJob(context.get(), request, &response);
  }
  const double waited_ms = absl::ToDoubleMilliseconds(absl::Now() - started);
  LatencySummary summary = recorder->Summary("GetJob");
  EXPECT_EQ(summary.count, 3);
  EXPECT_EQ(summary.errors, 1);
  EXPECT_EQ(summary.errors_by_code.at("NOT_FOUND"), 1);
  // Each call includes the server's 30 ms, and no more than the caller waited for all three.
  EXPECT_GE(summary.p50_ms, 30);
  EXPECT_LE(summary.max_ms, waited_ms);
  server->Shutdown();
}

}  // namespace
}  // namespace slimfit::bench
