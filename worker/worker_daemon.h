// The `slimfit-worker` daemon: flags, start-up, serving and shutdown (docs/PROTOCOL.md, "Worker
// start-up"). worker_main.cc only calls WorkerMain.
//
// Start-up: parse the flags → open the state directory → the profile (--profile, else the one
// cached in the state directory for this device, thread count and dtype, else calibrate and cache
// it) → serve the Worker service on --listen (port 0: a free port) and, with --port_file, write
// the bound "host:port" there atomically → register with the coordinator (retried while it is
// unavailable) → heartbeats.
//
// Shutdown on SIGTERM or SIGINT (a self-pipe: the handler only writes the signal to a pipe, a
// thread reads it and acts):
// take no new shard (UNAVAILABLE, heartbeat DRAINING at once), let the running shard finish for up
// to kDrainTimeout, then abandon it (its call ends CANCELLED), deregister, stop the gRPC server,
// exit 0. A second signal abandons the running shard at once. When the coordinator says this
// incarnation was superseded (another process registered with the same id) the worker stops
// serving at once, without deregistering, and exits 1.
//
// Operators (docs/OPERATIONS.md): with --metrics_listen=HOST:PORT it serves Prometheus metrics at
// /metrics (HTTPS with --tls_cert; plain HTTP on loopback only unless --insecure). Under systemd
// (Type=notify) it reports READY=1 once its gRPC port serves (STATUS says whether it has registered
// yet) and STOPPING=1 when it drains. SIGHUP changes nothing — every setting is fixed at
// registration — and is logged rather than ending the process.
//
// Identity: the first start registers with the join token (--token) and keeps the id and the
// credential the coordinator returns in the state directory; later starts use those, and the join
// token is needed again only if the coordinator forgets the worker. Security: off loopback the
// Worker service is served over TLS (--tls_cert, --tls_key) unless --insecure; with --tls_ca the
// caller must present a certificate signed by that CA, and the coordinator is reached over TLS
// verified against it (rpc/transport_security.h).
//
// Exit statuses: 0 after a clean shutdown (also --help); 2 for a usage error (bad or missing
// flag, unreadable --profile, a CUDA device without CUDA support, a coordinator that refuses the
// token, a revoked worker); 1 for any other failure (cannot listen, registration refused,
// superseded). Every fatal
// error is one line "slimfit-worker: <message>" on stderr; log lines (proto/log.h) go to stderr
// as well.
//
// Thread safety: WorkerMain is called once per process (it installs process-wide signal handlers
// and thread settings).
#ifndef SLIMFIT_WORKER_WORKER_DAEMON_H_
#define SLIMFIT_WORKER_WORKER_DAEMON_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "data_formats/dataset_format.h"
#include "rpc/transport_security.h"
#include "worker/local_datasets.h"

namespace slimfit::worker {

// How long a shard may run on after SIGTERM before it is abandoned.
inline constexpr absl::Duration kDrainTimeout = absl::Seconds(30);

// What the flags say; defaults as documented in Help().
struct WorkerDaemonOptions {
  std::string coordinator;             // --coordinator=host:port, required
  std::string listen = "127.0.0.1:0";  // --listen=host:port; port 0 picks a free one
  std::string advertise;               // --advertise=host:port; default: listen host, bound port
  std::string device = "cpu";          // --device=cpu|cuda:N
  int64_t memory_budget_bytes = 0;     // --memory_budget, required, > 0
  int64_t threads = 1;                 // --threads, 1..4096
  bool cuda_graphs = true;             // --cuda_graphs (WorkerService::Options::cuda_graphs)
  std::string state_dir;               // --state_dir, required
  std::string token;                   // --token (join token), else $SLIMFIT_WORKER_TOKEN; needed
                                       // until the state directory holds a credential
  rpc::TlsOptions tls;                 // --tls_cert --tls_key --tls_ca --insecure
  std::string profile;                 // --profile=FILE: use this DeviceProfile, skip calibration
  std::string port_file;               // --port_file=FILE: the bound host:port, once serving
  std::string metrics_listen;          // --metrics_listen=host:port: GET /metrics; "" off
  std::string metrics_port_file;       // --metrics_port_file=FILE: its bound host:port
  // --data=NAME=PATH[,...] with --data_type, --data_separator: datasets that stay on this worker
  // (local_datasets.h); parsed and checked here, read at start-up.
  std::vector<LocalDataSpec> local_data;
  rpc::DatasetFormat local_data_format;
};

struct ParsedFlags {
  bool help = false;  // --help: `help_text` is to be printed, nothing else was checked
  std::string help_text;
  WorkerDaemonOptions options;
};

// Parses the arguments after the program name. `env_token` is $SLIMFIT_WORKER_TOKEN (nullptr when
// unset). INVALID_ARGUMENT with a one-line message naming the flag.
[[nodiscard]] absl::StatusOr<ParsedFlags> ParseWorkerFlags(absl::Span<const std::string> args,
                                                           const char* env_token);

// The whole daemon: parse, start, serve until SIGTERM/SIGINT or a fatal error, shut down. Returns
// the exit status (see the file comment). Writes --help to `out` and the one-line fatal error to
// `err`.
int WorkerMain(const std::vector<std::string>& args, const char* env_token, std::ostream& out,
               std::ostream& err);

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_WORKER_DAEMON_H_
