// What the `slimfit` commands that talk to a coordinator share: their common flags, the channel
// and stub, and calls that carry the token and a deadline, retry where the protocol allows it and
// come back as absl::Status with a message a user can act on.
//
// Example (a command's Run function):
//   CoordinatorOptions connection;
//   base::FlagSet flags("status", "slimfit status JOB [flags]", "...");
//   flags.Positional("JOB", &job_id, "job id", base::FlagSet::kRequired);
//   AddCoordinatorFlags(flags, &connection);
//   bool help = false;
//   if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;
//   absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
//   v1::Job job;
//   absl::Status s = (*client)->Call("GetJob", Idempotency::kIdempotent,
//       [&](grpc::ClientContext* context) { return (*client)->stub().GetJob(context, request, &job); });
//
// Status mapping (docs/PROTOCOL.md, "Error codes"): codes pass through unchanged, the message
// prefixed with the RPC's name ("GetJob: job job-7 not found"). Two are reworded so that they say
// what to do: UNAVAILABLE or DEADLINE_EXCEEDED while the channel is not connected becomes
// UNAVAILABLE "cannot reach the coordinator at <address> (...)", naming --coordinator and
// SLIMFIT_COORDINATOR; UNAUTHENTICATED without a token names --token and SLIMFIT_TOKEN.
//
// Thread safety: a CoordinatorClient is safe for concurrent use (gRPC stubs are); it is not
// copyable. The free functions are not thread-safe with respect to the base::FlagSet they fill.
#ifndef SLIMFIT_CLIENT_COORDINATOR_CLIENT_H_
#define SLIMFIT_CLIENT_COORDINATOR_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <ostream>
#include <set>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/flags.h"
#include "proto/slimfit.grpc.pb.h"
#include "rpc/transport_security.h"

namespace slimfit::client {

// Where --coordinator and --token come from when the flags are not given.
inline constexpr char kCoordinatorEnv[] = "SLIMFIT_COORDINATOR";
inline constexpr char kTokenEnv[] = "SLIMFIT_TOKEN";
inline constexpr char kTlsCaEnv[] = "SLIMFIT_TLS_CA";
inline constexpr char kDefaultCoordinator[] = "127.0.0.1:50051";

struct CoordinatorOptions {
  // host:port of the coordinator. Default: $SLIMFIT_COORDINATOR, else kDefaultCoordinator.
  std::string coordinator;
  // The client token, sent as `authorization: Bearer <token>`. Default: $SLIMFIT_TOKEN; empty
  // sends no authorization header.
  std::string token;
  // Machine-readable output (each command documents its JSON).
  bool json = false;
  // Deadline of each unary call in seconds (> 0). Streams that carry files get this plus one
  // second per MiB; WatchJob has no deadline.
  double timeout_seconds = 30;
  // --tls, --tls_ca (default: $SLIMFIT_TLS_CA), --tls_cert, --tls_key: TLS to the coordinator.
  rpc::TlsOptions tls;
};

// Registers --coordinator, --token, --json, --timeout and the TLS flags on `flags`, writing to
// `*options`.
// REQUIRES: `options` outlives `flags`; none of these names is registered yet.
void AddCoordinatorFlags(base::FlagSet& flags, CoordinatorOptions* options);

// After flags.Parse: fills --coordinator and --token from the environment where they were not
// given, then validates. INVALID_ARGUMENT for an address that is not host:port or a timeout that is
// not positive.
[[nodiscard]] absl::Status ResolveCoordinatorOptions(const base::FlagSet& flags, CoordinatorOptions* options);

// What every service command does with its arguments: flags.Parse(args); with --help, writes
// flags.Help() to `out` and sets *help_shown (the command then returns OK); otherwise
// ResolveCoordinatorOptions. REQUIRES: AddCoordinatorFlags(flags, options) was called.
[[nodiscard]] absl::Status ParseServiceFlags(base::FlagSet& flags, absl::Span<const std::string> args,
                                             std::ostream& out, CoordinatorOptions* options,
                                             bool* help_shown);

// Paging through a listing: remembers the page tokens seen. Next() is INTERNAL when the
// coordinator hands out a token it gave before (a cycle) or more than kMaxPages pages, so that a
// misbehaving server cannot keep a listing command running for ever.
class PageTokens {
 public:
  static constexpr int kMaxPages = 10000;
  explicit PageTokens(std::string rpc) : rpc_(std::move(rpc)) {}
  [[nodiscard]] absl::Status Next(const std::string& token);

 private:
  std::string rpc_;
  std::set<std::string> seen_;
};

enum class Idempotency {
  // Safe to send again after a transient failure (docs/PROTOCOL.md lists these RPCs): retried on
  // UNAVAILABLE.
  kIdempotent,
  // Sent once.
  kOnce,
};

class CoordinatorClient {
 public:
  // Attempts of an idempotent call that keeps failing with UNAVAILABLE, and the first pause between
  // two (doubled each time): a coordinator that is restarting gets about a second; an address where
  // nothing listens fails within that time.
  static constexpr int kAttempts = 3;
  static constexpr absl::Duration kFirstRetryPause = absl::Milliseconds(250);

  // A channel to options.coordinator. Connects lazily: an unreachable address shows on the first
  // call. REQUIRES: `options` went through ResolveCoordinatorOptions.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Create(const CoordinatorOptions& options);

  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  v1::Coordinator::StubInterface& stub() const { return *stub_; }
  const CoordinatorOptions& options() const { return options_; }
  const std::string& address() const { return options_.coordinator; }

  // A context carrying the token, with a deadline of --timeout plus `extra` from now.
  std::unique_ptr<grpc::ClientContext> UnaryContext(absl::Duration extra = absl::ZeroDuration()) const;
  // A context carrying the token and no deadline (WatchJob, ExportModel: they last as long as the
  // job or the file).
  std::unique_ptr<grpc::ClientContext> StreamContext() const;

  // Runs `attempt` with a fresh UnaryContext(extra) and converts its status (Convert). An
  // idempotent call that fails with UNAVAILABLE is tried up to kAttempts times, pausing
  // kFirstRetryPause, then twice that. `attempt` must leave its outputs complete whenever it
  // returns OK (each attempt starts from scratch).
  [[nodiscard]] absl::Status Call(absl::string_view what, Idempotency idempotency,
                                  absl::FunctionRef<grpc::Status(grpc::ClientContext*)> attempt,
                                  absl::Duration extra = absl::ZeroDuration()) const;

  // A finished call's status as an absl::Status, as described at the top of this file. `context`
  // (optional) supplies the ErrorDetail trailer.
  absl::Status Convert(const grpc::Status& status, absl::string_view what,
                       const grpc::ClientContext* context = nullptr) const;

 private:
  CoordinatorClient(CoordinatorOptions options, std::shared_ptr<grpc::Channel> channel);

  // Constant after construction.
  const CoordinatorOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Coordinator::StubInterface> stub_;
};

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_COORDINATOR_CLIENT_H_
