#include "bench/rpc_latency.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/support/client_interceptor.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "rpc/rpc_util.h"

namespace slimfit::bench {
namespace {

using grpc::experimental::InterceptionHookPoints;

// "UNAVAILABLE": gRPC's codes are absl's, number for number.
std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

class TimingInterceptor final : public grpc::experimental::Interceptor {
 public:
  TimingInterceptor(std::string method, std::shared_ptr<LatencyRecorder> recorder)
      : method_(std::move(method)), recorder_(std::move(recorder)), started_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      started_ = absl::Now();
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS)) {
      const grpc::Status* status = methods->GetRecvStatus();
      recorder_->Record(method_, absl::Now() - started_,
                        status != nullptr ? status->error_code() : grpc::StatusCode::UNKNOWN);
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const std::shared_ptr<LatencyRecorder> recorder_;
  absl::Time started_;
};

class TimingFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TimingFactory(std::shared_ptr<LatencyRecorder> recorder) : recorder_(std::move(recorder)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo* info) override {
    return new TimingInterceptor(ShortMethodName(info->method()), recorder_);
  }

 private:
  const std::shared_ptr<LatencyRecorder> recorder_;
};

}  // namespace

double NearestRankPercentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(sorted.size()))) - 1;
  return sorted[index];
}

void LatencyRecorder::Record(absl::string_view method, absl::Duration latency, grpc::StatusCode code) {
  absl::MutexLock lock(&mutex_);
  auto it = samples_.find(method);
  if (it == samples_.end()) it = samples_.emplace(std::string(method), Samples()).first;
  it->second.milliseconds.push_back(absl::ToDoubleMilliseconds(latency));
  if (code != grpc::StatusCode::OK) ++it->second.errors_by_code[CodeName(code)];
}

LatencySummary LatencyRecorder::Summary(absl::string_view method) const {
  LatencySummary summary;
  std::vector<double> sorted;
  {
    absl::MutexLock lock(&mutex_);
    auto it = samples_.find(method);
    if (it == samples_.end()) return summary;
    sorted = it->second.milliseconds;
    summary.errors_by_code = it->second.errors_by_code;
  }
  std::sort(sorted.begin(), sorted.end());
  summary.count = static_cast<int64_t>(sorted.size());
  for (const auto& [code, calls] : summary.errors_by_code) summary.errors += calls;
  summary.p50_ms = NearestRankPercentile(sorted, 0.50);
  summary.p99_ms = NearestRankPercentile(sorted, 0.99);
  summary.max_ms = sorted.empty() ? 0 : sorted.back();
  return summary;
}

std::vector<std::string> LatencyRecorder::Methods() const {
  absl::MutexLock lock(&mutex_);
  std::vector<std::string> methods;
  for (const auto& [method, samples] : samples_) methods.push_back(method);
  return methods;
}

std::string ShortMethodName(absl::string_view full_method) {
  const size_t slash = full_method.rfind('/');
  return std::string(slash == absl::string_view::npos ? full_method : full_method.substr(slash + 1));
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface> TimingInterceptorFactory(
    std::shared_ptr<LatencyRecorder> recorder) {
  return std::make_unique<TimingFactory>(std::move(recorder));
}

std::shared_ptr<grpc::Channel> MakeTimedChannel(const std::string& address,
                                                std::shared_ptr<LatencyRecorder> recorder) {
  grpc::ChannelArguments arguments = rpc::ChannelArgumentsForPeers();
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(TimingInterceptorFactory(std::move(recorder)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, grpc::InsecureChannelCredentials(),
                                                                 arguments, std::move(interceptors));
}

}  // namespace slimfit::bench
