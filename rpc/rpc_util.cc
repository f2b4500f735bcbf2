#include "rpc/rpc_util.h"

#include <cstdint>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rpc/transport_security.h"

namespace slimfit::rpc {
namespace {

constexpr absl::string_view kBearerPrefix = "Bearer ";

}  // namespace

void AddBearerToken(grpc::ClientContext* context, absl::string_view token) {
  if (token.empty()) return;
  context->AddMetadata(kAuthorizationKey, absl::StrCat(kBearerPrefix, token));
}

std::optional<std::string> BearerToken(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorizationKey);
  if (it == metadata.end()) return std::nullopt;
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::StartsWith(value, kBearerPrefix)) return std::nullopt;
  value.remove_prefix(kBearerPrefix.size());
  if (value.empty()) return std::nullopt;
  return std::string(value);
}

absl::Status InvalidFieldError(absl::string_view field, absl::string_view why) {
  v1::ErrorDetail detail;
  detail.set_field(std::string(field));
  return AttachErrorDetail(absl::InvalidArgumentError(absl::StrCat(field, ": ", why)), detail);
}

absl::Status NotFoundResourceError(absl::string_view kind, absl::string_view id, absl::string_view message) {
  v1::ErrorDetail detail;
  detail.set_resource_kind(std::string(kind));
  detail.set_resource_id(std::string(id));
  return AttachErrorDetail(absl::NotFoundError(message), detail);
}

absl::Status AttachErrorDetail(absl::Status status, const v1::ErrorDetail& detail) {
  if (status.ok()) return status;
  status.SetPayload(kErrorDetailTypeUrl, absl::Cord(detail.SerializeAsString()));
  return status;
}

std::optional<v1::ErrorDetail> ErrorDetailOf(const absl::Status& status) {
  auto payload = status.GetPayload(kErrorDetailTypeUrl);
  if (!payload.has_value()) return std::nullopt;
  v1::ErrorDetail detail;
  if (!detail.ParseFromString(std::string(*payload))) return std::nullopt;
  return detail;
}

absl::Time CallDeadline(const grpc::ServerContext& context) {
  const std::chrono::system_clock::time_point deadline = context.deadline();
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContext* context) {
  if (status.ok()) return grpc::Status::OK;
  if (context != nullptr) {
    auto payload = status.GetPayload(kErrorDetailTypeUrl);
    if (payload.has_value()) context->AddTrailingMetadata(kErrorDetailKey, std::string(*payload));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what,
                            const grpc::ClientContext* context) {
  if (status.ok()) return absl::OkStatus();
  std::string hint;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) hint = TlsFailureHint(status.error_message());
  absl::Status result(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message(), hint));
  if (context != nullptr) {
    const auto& trailers = context->GetServerTrailingMetadata();
    auto it = trailers.find(kErrorDetailKey);
    if (it != trailers.end()) {
      v1::ErrorDetail detail;
      if (detail.ParseFromArray(it->second.data(), static_cast<int>(it->second.size()))) {
        result = AttachErrorDetail(std::move(result), detail);
      }
    }
  }
  return result;
}

std::unique_ptr<grpc::ClientContext> MakeClientContext(absl::string_view token,
                                                       std::chrono::milliseconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  AddBearerToken(context.get(), token);
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return grpc::CreateCustomChannel(address,
                                   credentials != nullptr ? credentials : grpc::InsecureChannelCredentials(),
                                   ChannelArgumentsForPeers());
}

grpc::ChannelArguments ChannelArgumentsForPeers() {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  arguments.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  // Reconnect quickly after a peer restarts (a coordinator restart, a worker coming back).
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  return arguments;
}

absl::Status ValidateAddress(absl::string_view address, absl::string_view flag, bool allow_port_zero) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", address, "\" is not host:port (e.g. 127.0.0.1:50051)"));
  }
  absl::string_view host = address.substr(0, colon);
  if (absl::StartsWith(host, "[") != absl::EndsWith(host, "]")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": unbalanced brackets in \"", address, "\""));
  }
  int port = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < (allow_port_zero ? 0 : 1) ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": port of \"", address, "\" must be ", allow_port_zero ? 0 : 1, "..65535"));
  }
  return absl::OkStatus();
}

}  // namespace slimfit::rpc
