#include "tests/lying_proxy.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace slimfit::testing_util {
namespace {

// Applies `f` to every element of the chunk's little-endian floats.
template <typename T, typename F>
void ForEachElement(std::string* data, F f) {
  for (size_t at = 0; at + sizeof(T) <= data->size(); at += sizeof(T)) {
    T value;
    std::memcpy(&value, data->data() + at, sizeof(T));
    value = f(value, at == 0);
    std::memcpy(data->data() + at, &value, sizeof(T));
  }
}

void Tamper(const Lie& lie, v1::TensorChunk* chunk) {
  auto apply = [&](auto value, bool first) -> decltype(value) {
    using T = decltype(value);
    if (lie.kind == Lie::Kind::kNotFinite) return first ? std::numeric_limits<T>::quiet_NaN() : value;
    return static_cast<T>(value * lie.factor);
  };
  if (chunk->dtype() == v1::DTYPE_FLOAT64) {
    ForEachElement<double>(chunk->mutable_data(), apply);
  } else {
    ForEachElement<float>(chunk->mutable_data(), apply);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<LyingProxy>> LyingProxy::Start(Lie lie) {
  std::unique_ptr<LyingProxy> proxy(new LyingProxy(lie));
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(proxy.get());
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  proxy->server_ = builder.BuildAndStart();
  if (proxy->server_ == nullptr || port == 0) return absl::InternalError("the lying proxy could not listen");
  proxy->address_ = absl::StrCat("127.0.0.1:", port);
  return proxy;
}

LyingProxy::~LyingProxy() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

void LyingProxy::SetUpstream(const std::string& worker_address) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetMaxSendMessageSize(-1);
  auto stub = v1::Worker::NewStub(
      grpc::CreateCustomChannel(worker_address, grpc::InsecureChannelCredentials(), arguments));
  absl::MutexLock lock(&mutex_);
  upstream_ = std::move(stub);
}

std::shared_ptr<v1::Worker::Stub> LyingProxy::Upstream() {
  absl::MutexLock lock(&mutex_);
  return upstream_;
}

std::unique_ptr<grpc::ClientContext> LyingProxy::Forwarded(const grpc::ServerContext& context) {
  auto forwarded = std::make_unique<grpc::ClientContext>();
  forwarded->set_deadline(context.deadline());
  for (const auto& [key, value] : context.client_metadata()) {
    if (key == "authorization")
      forwarded->AddMetadata(std::string(key.data(), key.size()), std::string(value.data(), value.size()));
  }
  return forwarded;
}

grpc::Status LyingProxy::ComputeGradient(grpc::ServerContext* context,
                                         const v1::ComputeGradientRequest* request,
                                         grpc::ServerWriter<v1::ComputeGradientResponse>* writer) {
  std::shared_ptr<v1::Worker::Stub> upstream = Upstream();
  if (upstream == nullptr)
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker behind the proxy yet");
  const bool lying = !request->evaluate_only() && request->round() >= lie_.from_round;
  if (lying && lie_.kind == Lie::Kind::kStall && !stalled_.exchange(true)) {
    ++lies_told_;
    const absl::Time start = absl::Now();
    const absl::Time until = start + absl::Seconds(lie_.stall_seconds);
    while (!context->IsCancelled() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
    last_stall_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
    if (context->IsCancelled()) ++stalls_cancelled_;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the lying proxy held the call");
  }
  std::unique_ptr<grpc::ClientContext> forwarded = Forwarded(*context);
  std::unique_ptr<grpc::ClientReader<v1::ComputeGradientResponse>> reader =
      upstream->ComputeGradient(forwarded.get(), *request);
  bool told = false;
  v1::ComputeGradientResponse response;
  int chunks = 0;
  while (reader->Read(&response)) {
    if (lying && response.has_chunk() && lie_.kind == Lie::Kind::kBreakStream && ++chunks > 1) {
      // The first chunk went through; the connection "breaks" before the second.
      forwarded->TryCancel();
      while (reader->Read(&response)) {
      }
      reader->Finish();
      ++lies_told_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the lying proxy broke the stream midway");
    }
    if (lying && response.has_chunk() &&
        (lie_.kind == Lie::Kind::kNotFinite || lie_.kind == Lie::Kind::kScale)) {
      Tamper(lie_, response.mutable_chunk());
      told = true;
    }
    if (lying && response.has_summary() && lie_.kind == Lie::Kind::kWrongVersion) {
      response.mutable_summary()->set_parameter_version(response.summary().parameter_version() + 1);
      told = true;
    }
    if (!writer->Write(response)) forwarded->TryCancel();
  }
  const grpc::Status upstream_status = reader->Finish();
  if (lying && lie_.kind == Lie::Kind::kFailAfterSummary && upstream_status.ok()) {
    ++lies_told_;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the lying proxy ended the call after the whole result");
  }
  if (told) ++lies_told_;
  return upstream_status;
}

grpc::Status LyingProxy::GetProfile(grpc::ServerContext* context, const v1::GetProfileRequest* request,
                                    v1::GetProfileResponse* response) {
  std::shared_ptr<v1::Worker::Stub> upstream = Upstream();
  if (upstream == nullptr)
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker behind the proxy yet");
  return upstream->GetProfile(Forwarded(*context).get(), *request, response);
}

grpc::Status LyingProxy::Plan(grpc::ServerContext* context, const v1::PlanRequest* request,
                              v1::MemoryPlan* response) {
  std::shared_ptr<v1::Worker::Stub> upstream = Upstream();
  if (upstream == nullptr)
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker behind the proxy yet");
  return upstream->Plan(Forwarded(*context).get(), *request, response);
}

}  // namespace slimfit::testing_util
