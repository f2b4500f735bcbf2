#include "client/coordinator_client.h"

#include <chrono>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/rpc_util.h"

namespace slimfit::client {
namespace {

std::string FromEnvironment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::chrono::milliseconds ToMilliseconds(absl::Duration duration) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(duration));
}

}  // namespace

void AddCoordinatorFlags(base::FlagSet& flags, CoordinatorOptions* options) {
  flags.String("coordinator", &options->coordinator,
               absl::StrCat("coordinator address host:port (default: $", kCoordinatorEnv, ", else ",
                            kDefaultCoordinator, ")"));
  // The default is read from the environment after parsing, so that --help never prints a token.
  flags.String(
      "token", &options->token,
      absl::StrCat("client token, sent as 'authorization: Bearer <token>' (default: $", kTokenEnv, ")"));
  flags.Bool("json", &options->json, "print JSON instead of text");
  flags.Double("timeout", &options->timeout_seconds, "seconds each request may take");
  rpc::AddTlsFlags(flags, rpc::TlsFlagSet::kClient, &options->tls);
}

absl::Status PageTokens::Next(const std::string& token) {
  if (!seen_.insert(token).second) {
    return absl::InternalError(
        absl::StrCat(rpc_, ": the coordinator returned the page token '", token, "' twice"));
  }
  if (static_cast<int>(seen_.size()) > kMaxPages) {
    return absl::InternalError(absl::StrCat(rpc_, ": more than ", kMaxPages, " pages; giving up"));
  }
  return absl::OkStatus();
}

absl::Status ParseServiceFlags(base::FlagSet& flags, absl::Span<const std::string> args, std::ostream& out,
                               CoordinatorOptions* options, bool* help_shown) {
  *help_shown = false;
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) return parsed;
  if (flags.help_requested()) {
    out << flags.Help();
    *help_shown = true;
    return absl::OkStatus();
  }
  return ResolveCoordinatorOptions(flags, options);
}

absl::Status ResolveCoordinatorOptions(const base::FlagSet& flags, CoordinatorOptions* options) {
  if (!flags.IsSet("coordinator")) {
    options->coordinator = FromEnvironment(kCoordinatorEnv);
    if (options->coordinator.empty()) options->coordinator = kDefaultCoordinator;
  }
  if (!flags.IsSet("token")) options->token = FromEnvironment(kTokenEnv);
  if (!flags.IsSet("tls_ca")) options->tls.ca_file = FromEnvironment(kTlsCaEnv);
  const absl::string_view source = flags.IsSet("coordinator") ? "--coordinator" : kCoordinatorEnv;
  if (absl::Status valid = rpc::ValidateAddress(options->coordinator, source, /*allow_port_zero=*/false);
      !valid.ok()) {
    return valid;
  }
  if (!(options->timeout_seconds > 0) || options->timeout_seconds > 86400) {
    return absl::InvalidArgumentError(absl::StrCat("--timeout=", options->timeout_seconds,
                                                   ": expected a positive number of seconds, at most 86400"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(
    const CoordinatorOptions& options) {
  absl::StatusOr<std::optional<rpc::TlsMaterial>> tls = rpc::LoadTls(options.tls);
  if (!tls.ok()) return tls.status();
  std::shared_ptr<grpc::Channel> channel =
      rpc::MakeChannel(options.coordinator, rpc::ChannelCredentials(*tls));
  if (channel == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open a channel to ", options.coordinator));
  }
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(options, std::move(channel)));
}

CoordinatorClient::CoordinatorClient(CoordinatorOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)), channel_(channel), stub_(v1::Coordinator::NewStub(channel)) {}

std::unique_ptr<grpc::ClientContext> CoordinatorClient::UnaryContext(absl::Duration extra) const {
  return rpc::MakeClientContext(options_.token,
                                ToMilliseconds(absl::Seconds(options_.timeout_seconds) + extra));
}

std::unique_ptr<grpc::ClientContext> CoordinatorClient::StreamContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  rpc::AddBearerToken(context.get(), options_.token);
  return context;
}

absl::Status CoordinatorClient::Call(absl::string_view what, Idempotency idempotency,
                                     absl::FunctionRef<grpc::Status(grpc::ClientContext*)> attempt,
                                     absl::Duration extra) const {
  absl::Duration pause = kFirstRetryPause;
  for (int attempt_number = 1;; ++attempt_number) {
    std::unique_ptr<grpc::ClientContext> context = UnaryContext(extra);
    const grpc::Status status = attempt(context.get());
    const bool retry = status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                       idempotency == Idempotency::kIdempotent && attempt_number < kAttempts;
    if (!retry) return Convert(status, what, context.get());
    absl::SleepFor(pause);
    pause *= 2;
  }
}

absl::Status CoordinatorClient::Convert(const grpc::Status& status, absl::string_view what,
                                        const grpc::ClientContext* context) const {
  if (status.ok()) return absl::OkStatus();
  const grpc::StatusCode code = status.error_code();
  if ((code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED) &&
      channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the coordinator at ", options_.coordinator, " (", what, ": ", status.error_message(),
        "); is slimfit-coordinator running there? (--coordinator, $", kCoordinatorEnv, ")"));
  }
  absl::Status converted = rpc::FromGrpcStatus(status, what, context);
  if (code == grpc::StatusCode::UNAUTHENTICATED && options_.token.empty()) {
    return absl::Status(
        converted.code(),
        absl::StrCat(converted.message(), " (no token given: pass --token or set $", kTokenEnv, ")"));
  }
  return converted;
}

}  // namespace slimfit::client
