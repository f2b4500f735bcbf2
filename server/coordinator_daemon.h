// The `slimfit-coordinator` daemon: flags, start-up, serving and shutdown. coordinator_main.cc
// only calls CoordinatorMain.
//
//   slimfit-coordinator --state_dir=/var/lib/slimfit --listen=0.0.0.0:50051
//       --token=$CLIENT_TOKEN --worker_token=$WORKER_TOKEN   (or $SLIMFIT_TOKEN, $SLIMFIT_WORKER_TOKEN)
//
// Start-up: parse the flags → open the state directory (jobs left QUEUED or RUNNING resume from
// their latest checkpoint) → serve the Coordinator service on --listen (port 0: a free port) and,
// with --port_file, write the bound "host:port" there atomically.
//
// Security: off loopback it serves TLS (--tls_cert, --tls_key) unless --insecure; with --tls_ca,
// mutual TLS for workers (rpc/transport_security.h). Client tokens come from --token and/or
// --token_file, join tokens for new workers from --worker_token and/or --worker_token_file.
//
// Operators (docs/OPERATIONS.md): with --metrics_listen=HOST:PORT it also serves, over HTTP (HTTPS
// with --tls_cert), Prometheus metrics at /metrics and a status page at / (server/status_page.h;
// its content needs a client token). Under systemd (Type=notify) it reports READY=1 once both ports
// serve, RELOADING=1 around a SIGHUP and STOPPING=1 at shutdown.
//
// SIGHUP: re-reads the token files (a bad file keeps the tokens in use and logs why).
// SIGTERM/SIGINT: stops the job runners (jobs stay RUNNING in the state directory and resume at the
// next start), stops accepting calls and exits 0.
//
// Exit statuses (base/exit_status.h): 0 after a clean shutdown (also --help); 2 for a usage error
// (bad or missing flag); 1 for a start-up failure (state directory, port in use). Every fatal error
// is one line "slimfit-coordinator: <message>" on stderr; log lines (base/log.h) go there too.
//
// Thread safety: CoordinatorMain is called once per process (it installs process-wide signal
// handlers and thread settings).
#ifndef SLIMFIT_SERVER_COORDINATOR_DAEMON_H_
#define SLIMFIT_SERVER_COORDINATOR_DAEMON_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rpc/transport_security.h"

namespace slimfit::server {

// What the flags say; defaults as documented in the --help text.
struct CoordinatorDaemonOptions {
  std::string listen = "127.0.0.1:50051";  // --listen=host:port; port 0 picks a free one
  std::string state_dir;                   // --state_dir, required
  std::string token;                       // --token, else $SLIMFIT_TOKEN
  std::string token_file;                  // --token_file: more client tokens, re-read on SIGHUP
  std::string worker_token;                // --worker_token (join token), else $SLIMFIT_WORKER_TOKEN
  std::string worker_token_file;           // --worker_token_file: more join tokens, re-read on SIGHUP
  rpc::TlsOptions tls;                     // --tls_cert --tls_key --tls_ca --insecure
  int64_t heartbeat_interval_ms = 1000;    // how often workers heartbeat; ≥ 10
  int64_t lost_after_ms = 5000;            // silence after which a worker is LOST; ≥ 2 intervals
  int64_t shard_timeout_seconds = 120;     // a shard's deadline: this + 10× its predicted compute
  int64_t max_attempts = 5;                // per shard, before the job fails
  int64_t max_assembly_bytes = int64_t{512} << 20;     // shard gradients a job assembles at once
  int64_t stream_into_sum_bytes = int64_t{128} << 20;  // larger shard gradients are summed as they arrive
  int64_t max_sequences_per_shard = 0;                 // 0: as many as fit one request
  std::string offload_dir;  // --offload_dir: AdamW's moments, spot-checked results in files here; "" memory
  int64_t upload_limit_bytes = int64_t{1} << 30;
  int64_t max_model_bytes = int64_t{2} << 30;  // largest model (parameter bytes) a job may train
  std::string port_file;                       // --port_file=FILE: the bound host:port, once serving
  std::string metrics_listen;                  // --metrics_listen=host:port: /metrics and the page; "" off
  std::string metrics_port_file;               // --metrics_port_file=FILE: its bound host:port
  int64_t threads = 1;                         // BLAS threads for the optimizer step and checkpoints
};

struct ParsedCoordinatorFlags {
  bool help = false;  // --help: `help_text` is to be printed, nothing else was checked
  std::string help_text;
  CoordinatorDaemonOptions options;
};

// The environment a daemon reads its secrets from (nullptr when unset).
struct CoordinatorEnvironment {
  const char* token = nullptr;         // $SLIMFIT_TOKEN
  const char* worker_token = nullptr;  // $SLIMFIT_WORKER_TOKEN
};

// Parses the arguments after the program name. INVALID_ARGUMENT with a one-line message naming
// the flag.
[[nodiscard]] absl::StatusOr<ParsedCoordinatorFlags> ParseCoordinatorFlags(absl::Span<const std::string> args,
                                                                           const CoordinatorEnvironment& env);

// The whole daemon: parse, start, serve until SIGTERM/SIGINT, shut down. Returns the exit status
// (see the file comment). Writes --help to `out` and the one-line fatal error to `err`.
int CoordinatorMain(const std::vector<std::string>& args, const CoordinatorEnvironment& env,
                    std::ostream& out, std::ostream& err);

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_COORDINATOR_DAEMON_H_
