#include "rpc/rpc_metrics.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/metrics.h"
#include "gtest/gtest.h"
#include "proto/slimfit.grpc.pb.h"
#include "rpc/standard_services.h"

namespace slimfit::rpc {
namespace {

constexpr char kCompute[] = "/slimfit.v1.Worker/ComputeGradient";
constexpr char kProfile[] = "/slimfit.v1.Worker/GetProfile";

// A Worker service whose answers the test knows: GetProfile echoes a fixed device (or fails for
// device "fail"); ComputeGradient streams two chunks and a summary.
class KnownWorker final : public v1::Worker::Service {
 public:
  grpc::Status GetProfile(grpc::ServerContext*, const v1::GetProfileRequest*,
                          v1::GetProfileResponse* response) override {
    response->set_device("cpu");
    response->set_worker_id("w-1");
    return grpc::Status::OK;
  }
  grpc::Status Plan(grpc::ServerContext*, const v1::PlanRequest*, v1::MemoryPlan*) override {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no plan here");
  }
  grpc::Status ComputeGradient(grpc::ServerContext*, const v1::ComputeGradientRequest* request,
                               grpc::ServerWriter<v1::ComputeGradientResponse>* writer) override {
    for (int i = 0; i < 2; ++i) {
      v1::ComputeGradientResponse chunk;
      chunk.mutable_chunk()->set_data(std::string(1000, 'x'));
      writer->Write(chunk);
    }
    v1::ComputeGradientResponse last;
    last.mutable_summary()->set_job_id(request->job_id());
    last.mutable_summary()->set_compute_seconds(1.5);
    writer->Write(last);
    return grpc::Status::OK;
  }
};

// Sample value of `line_prefix` ("name{labels}") in `text`, or -1.
double Value(const std::string& text, const std::string& line_prefix) {
  const size_t at = text.find(line_prefix + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + line_prefix.size() + 1));
}

TEST(RpcMetrics, RecordsLatencyBytesAndCodesPerMethodAndObservesSentMessages) {
  base::MetricRegistry registry;
  RpcMetrics metrics(&registry, {v1::Worker::service_full_name()});
  ASSERT_TRUE(registry.registration_status().ok()) << registry.registration_status();
  absl::Mutex mutex;
  std::vector<double> summaries;
  metrics.ObserveSent(kCompute, [&](const google::protobuf::Message& message) {
    const auto* response = dynamic_cast<const v1::ComputeGradientResponse*>(&message);
    ASSERT_NE(response, nullptr);
    if (response->has_summary()) {
      absl::MutexLock lock(&mutex);
      summaries.push_back(response->summary().compute_seconds());
    }
  });

  KnownWorker service;
  EnableStandardServices();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  metrics.Install(&builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  SetServing(server.get(), {v1::Worker::service_full_name()}, true);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::Worker::Stub> stub = v1::Worker::NewStub(channel);

  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    v1::GetProfileResponse response;
    ASSERT_TRUE(stub->GetProfile(&context, v1::GetProfileRequest(), &response).ok());
  }
  {
    grpc::ClientContext context;
    v1::MemoryPlan response;
    EXPECT_EQ(stub->Plan(&context, v1::PlanRequest(), &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::ComputeGradientRequest request;
  request.set_job_id("job-000007");
  request.set_tokens(std::string(300, 'a'));
  {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::ComputeGradientResponse>> reader =
        stub->ComputeGradient(&context, request);
    v1::ComputeGradientResponse response;
    int received = 0;
    while (reader->Read(&response)) ++received;
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_EQ(received, 3);
  }
  ASSERT_TRUE(CheckHealth(channel, v1::Worker::service_full_name(), absl::Seconds(5)).ok());
  {  // a method the server does not have: no label of its own
    grpc::GenericStub generic(channel);
    grpc::ClientContext context;
    grpc::CompletionQueue queue;
    grpc::ByteBuffer request_bytes;
    grpc::ByteBuffer response_bytes;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
        generic.PrepareUnaryCall(&context, "/slimfit.v1.Worker/NoSuchMethod", request_bytes, &queue);
    call->StartCall();
    grpc::Status status;
    call->Finish(&response_bytes, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(queue.Next(&tag, &ok));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
    queue.Shutdown();
    while (queue.Next(&tag, &ok)) {
    }
  }
  server->Shutdown();
  server->Wait();

  const std::string text = registry.Exposition();
  EXPECT_EQ(
      Value(text, absl::StrCat("slimfit_rpc_server_seconds_count{method=\"", kProfile, "\",code=\"OK\"}")), 3)
      << text;
  EXPECT_EQ(
      Value(text,
            "slimfit_rpc_server_seconds_count{method=\"/slimfit.v1.Worker/Plan\",code=\"INVALID_ARGUMENT\"}"),
      1)
      << text;
  EXPECT_EQ(
      Value(text, absl::StrCat("slimfit_rpc_server_seconds_count{method=\"", kCompute, "\",code=\"OK\"}")), 1)
      << text;
  EXPECT_EQ(
      Value(text, "slimfit_rpc_server_seconds_count{method=\"/grpc.health.v1.Health/Check\",code=\"OK\"}"), 1)
      << text;

  // Bytes: exactly the serialized sizes of what crossed the wire.
  v1::GetProfileResponse profile;
  profile.set_device("cpu");
  profile.set_worker_id("w-1");
  EXPECT_EQ(Value(text, absl::StrCat("slimfit_rpc_server_sent_bytes_total{method=\"", kProfile, "\"}")),
            3.0 * static_cast<double>(profile.ByteSizeLong()));
  v1::ComputeGradientResponse chunk;
  chunk.mutable_chunk()->set_data(std::string(1000, 'x'));
  v1::ComputeGradientResponse last;
  last.mutable_summary()->set_job_id("job-000007");
  last.mutable_summary()->set_compute_seconds(1.5);
  EXPECT_EQ(Value(text, absl::StrCat("slimfit_rpc_server_sent_bytes_total{method=\"", kCompute, "\"}")),
            static_cast<double>(2 * chunk.ByteSizeLong() + last.ByteSizeLong()));
  EXPECT_EQ(Value(text, absl::StrCat("slimfit_rpc_server_received_bytes_total{method=\"", kCompute, "\"}")),
            static_cast<double>(request.ByteSizeLong()));
  EXPECT_EQ(text.find("NoSuchMethod"), std::string::npos) << text;
  // The health service's raw buffers are not measured.
  EXPECT_EQ(text.find("received_bytes_total{method=\"/grpc.health"), std::string::npos) << text;

  absl::MutexLock lock(&mutex);
  EXPECT_EQ(summaries, std::vector<double>{1.5});
}

TEST(RpcMetrics, UnknownMethodsShareOneLabel) {
  base::MetricRegistry registry;
  RpcMetrics metrics(&registry, {v1::Coordinator::service_full_name(), "no.such.Service"});
  EXPECT_EQ(metrics.MethodLabel("/slimfit.v1.Coordinator/SubmitJob"), "/slimfit.v1.Coordinator/SubmitJob");
  EXPECT_EQ(metrics.MethodLabel("/grpc.health.v1.Health/Check"), "/grpc.health.v1.Health/Check");
  EXPECT_EQ(metrics.MethodLabel("/slimfit.v1.Coordinator/NoSuchMethod"), "other");
  EXPECT_EQ(metrics.MethodLabel("/slimfit.v1.Worker/ComputeGradient"), "other");  // not served here
  EXPECT_EQ(metrics.MethodLabel("/no.such.Service/X"), "other");
}

}  // namespace
}  // namespace slimfit::rpc
