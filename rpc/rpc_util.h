// What every slimfit gRPC edge shares (docs/PROTOCOL.md, "Authentication" and "Errors"):
//   - bearer tokens: `authorization: Bearer <token>` in the call metadata, compared in constant time;
//   - status conversion: absl::Status inside components, grpc::Status only at the RPC edge. An
//     absl::Status may carry a slimfit.v1.ErrorDetail payload (AttachErrorDetail); at the edge it
//     travels in the binary trailing metadata key `slimfit-error-bin`, and a client gets it back as
//     the same payload (ErrorDetailOf).
//   - client deadlines and contexts.
//
// Thread safety: free functions on caller-owned values.
#ifndef SLIMFIT_RPC_RPC_UTIL_H_
#define SLIMFIT_RPC_RPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/slimfit.pb.h"

namespace slimfit::rpc {

inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kErrorDetailKey[] = "slimfit-error-bin";
// Payload type URL under which an absl::Status carries a serialised v1::ErrorDetail.
inline constexpr char kErrorDetailTypeUrl[] = "type.googleapis.com/slimfit.v1.ErrorDetail";

// Adds `authorization: Bearer <token>` to an outgoing call (nothing for an empty token).
void AddBearerToken(grpc::ClientContext* context, absl::string_view token);

// The token of an incoming call's `authorization: Bearer <token>` metadata; nullopt when the
// header is missing or not a bearer token.
std::optional<std::string> BearerToken(const grpc::ServerContext& context);

// `status` with `detail` attached as its ErrorDetail payload.
absl::Status AttachErrorDetail(absl::Status status, const v1::ErrorDetail& detail);
// The ErrorDetail payload of `status`, if any.
std::optional<v1::ErrorDetail> ErrorDetailOf(const absl::Status& status);

// INVALID_ARGUMENT "<field>: <why>" with ErrorDetail.field = `field` ("spec.rounds").
absl::Status InvalidFieldError(absl::string_view field, absl::string_view why);
// NOT_FOUND `message` with ErrorDetail.resource_kind and resource_id ("dataset", "ds-…").
absl::Status NotFoundResourceError(absl::string_view kind, absl::string_view id, absl::string_view message);

// Server edge: the same code and message; an ErrorDetail payload goes to the trailing metadata of
// `context` (when given).
grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContext* context = nullptr);

// Client edge: the same code and message prefixed with `what` ("GetJob: ..."); an ErrorDetail in
// the trailing metadata of `context` (when given) comes back as the payload. An UNAVAILABLE
// failure to connect says which address could not be reached.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what,
                            const grpc::ClientContext* context = nullptr);

// The deadline of an incoming call; InfiniteFuture when the caller set none (gRPC's "none" is a
// time point centuries away).
absl::Time CallDeadline(const grpc::ServerContext& context);

// A client context with the bearer token and a deadline `timeout` from now.
std::unique_ptr<grpc::ClientContext> MakeClientContext(absl::string_view token,
                                                       std::chrono::milliseconds timeout);

// A channel to `address` (host:port) with `credentials` (plaintext when null; see
// transport_security.h for TLS), with ChannelArgumentsForPeers().
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

// What every slimfit channel is made with: retries of non-idempotent calls by the channel itself
// are off; reconnects after a peer restart are quick; keepalive pings every 5 s (answered within
// 5 s) end calls over a silently broken connection within about 10 s. For a caller that builds its
// own channel (bench/rpc_latency.h adds interceptors) and must behave like the daemons.
grpc::ChannelArguments ChannelArgumentsForPeers();

// INVALID_ARGUMENT unless `address` looks like host:port with a port in 1..65535 ("[::1]:50051"
// and "localhost:0" style included; port 0 only when `allow_port_zero`).
absl::Status ValidateAddress(absl::string_view address, absl::string_view flag, bool allow_port_zero);

}  // namespace slimfit::rpc

#endif  // SLIMFIT_RPC_RPC_UTIL_H_
