#include "rpc/rpc_metrics.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace slimfit::rpc {
namespace {

// gRPC's own services that every daemon serves (rpc/standard_services.h).
constexpr const char* kStandardMethods[] = {
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
};

// "OK", "UNAVAILABLE", ... as grpc_status_code names them.
std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    default:
      return "UNKNOWN";
  }
}

}  // namespace

// One call: created when it arrives, records when it is destroyed (after its status was sent or
// the call was cancelled).
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(const RpcMetrics* metrics, std::string method)
      : metrics_(metrics),
        method_(std::move(method)),
        label_(metrics->MethodLabel(method_)),
        counts_bytes_(metrics->CountsBytes(method_)),
        observer_(metrics->SentObserver(method_)),
        start_(absl::Now()) {}

  ~MetricsInterceptor() override {
    const absl::Time end = ended_ ? end_ : absl::Now();
    metrics_->seconds_.WithLabels({label_, CodeName(code_)}).Observe(absl::ToDoubleSeconds(end - start_));
    if (received_ > 0)
      metrics_->received_bytes_.WithLabels({label_}).Increment(static_cast<double>(received_));
    if (sent_ > 0) metrics_->sent_bytes_.WithLabels({label_}).Increment(static_cast<double>(sent_));
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (counts_bytes_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      if (const void* message = methods->GetRecvMessage()) {
        received_ += static_cast<const google::protobuf::Message*>(message)->ByteSizeLong();
      }
    }
    if (counts_bytes_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      if (const void* raw = methods->GetSendMessage()) {
        const auto* message = static_cast<const google::protobuf::Message*>(raw);
        sent_ += message->ByteSizeLong();
        if (observer_ != nullptr) (*observer_)(*message);
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      code_ = methods->GetSendStatus().error_code();
      end_ = absl::Now();
      ended_ = true;
    }
    methods->Proceed();
  }

 private:
  const RpcMetrics* const metrics_;
  const std::string method_;
  const std::string label_;
  const bool counts_bytes_;
  const RpcMetrics::MessageObserver* const observer_;
  const absl::Time start_;
  // Hooks of one call run one at a time.
  size_t received_ = 0;
  size_t sent_ = 0;
  grpc::StatusCode code_ = grpc::StatusCode::CANCELLED;
  bool ended_ = false;
  absl::Time end_;
};

namespace {

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(const RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(metrics_, info->method() == nullptr ? "" : info->method());
  }

 private:
  const RpcMetrics* metrics_;
};

}  // namespace

RpcMetrics::RpcMetrics(base::MetricRegistry* registry, const std::vector<std::string>& services)
    : seconds_(
          registry->AddHistogram("slimfit_rpc_server_seconds",
                                 "Server-side latency of RPCs, from arrival to status, by method and status "
                                 "code (streams: the whole stream).",
                                 {"method", "code"}, base::LatencyBuckets())),
      received_bytes_(registry->AddCounter("slimfit_rpc_server_received_bytes_total",
                                           "Serialized bytes of the request messages received, by method.",
                                           {"method"})),
      sent_bytes_(registry->AddCounter("slimfit_rpc_server_sent_bytes_total",
                                       "Serialized bytes of the response messages sent, by method.",
                                       {"method"})) {
  for (const char* method : kStandardMethods) methods_.insert(method);
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const std::string& name : services) {
    const google::protobuf::ServiceDescriptor* service = pool->FindServiceByName(name);
    if (service == nullptr) continue;
    const bool ours = absl::StartsWith(name, "slimfit.");
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string method = absl::StrCat("/", name, "/", service->method(i)->name());
      methods_.insert(method);
      if (ours) protobuf_methods_.insert(method);
    }
  }
}

void RpcMetrics::ObserveSent(const std::string& method, MessageObserver observer) {
  sent_observers_[method] = std::move(observer);
}

const RpcMetrics::MessageObserver* RpcMetrics::SentObserver(const std::string& method) const {
  auto it = sent_observers_.find(method);
  return it == sent_observers_.end() ? nullptr : &it->second;
}

std::string RpcMetrics::MethodLabel(absl::string_view method) const {
  return methods_.count(std::string(method)) > 0 ? std::string(method) : "other";
}

void RpcMetrics::Install(grpc::ServerBuilder* builder) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<Factory>(this));
  builder->experimental().SetInterceptorCreators(std::move(factories));
}

}  // namespace slimfit::rpc
