#include "server/coordinator_daemon.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/exit_status.h"
#include "base/file_backed_memory.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/http_server.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/process_metrics.h"
#include "base/service_notify.h"
#include "base/signal_pipe.h"
#include "performer/cpu_runtime.h"
#include "proto/slimfit.grpc.pb.h"
#include "rpc/http_endpoint.h"
#include "rpc/rpc_metrics.h"
#include "rpc/rpc_util.h"
#include "rpc/standard_services.h"
#include "server/access_tokens.h"
#include "server/coordinator.h"
#include "server/coordinator_metrics.h"
#include "server/coordinator_service.h"
#include "server/status_page.h"

namespace slimfit::server {
namespace {

constexpr char kProgram[] = "slimfit-coordinator";

// Prints "slimfit-coordinator: <message>" as one line; the exit status for `status`.
int Fail(std::ostream& err, const absl::Status& status) {
  err << base::FormatErrorLine(kProgram, status.message()) << std::flush;
  return base::ExitCodeForStatus(status);
}

// A failure to tell systemd is logged, never fatal.
void Notify(const absl::Status& status) {
  if (!status.ok()) base::LogWarning(status.message());
}

// A start-up failure: exit status 1 whatever its code, since the flags were fine.
int FailStart(std::ostream& err, absl::string_view message) {
  err << base::FormatErrorLine(kProgram, message) << std::flush;
  return base::kExitFailure;
}

int Run(const CoordinatorDaemonOptions& flags, std::ostream& err) {
  absl::StatusOr<std::unique_ptr<base::SignalPipe>> signals =
      base::SignalPipe::Install({SIGTERM, SIGINT, SIGHUP});
  if (!signals.ok()) return FailStart(err, signals.status().message());

  base::SetLogComponent("coordinator");
  absl::StatusOr<std::optional<rpc::TlsMaterial>> tls = rpc::LoadTls(flags.tls);
  if (!tls.ok()) return Fail(err, tls.status());
  absl::StatusOr<std::unique_ptr<AccessTokens>> client_tokens =
      AccessTokens::Create("client", flags.token, flags.token_file);
  if (!client_tokens.ok()) return Fail(err, client_tokens.status());
  absl::StatusOr<std::unique_ptr<AccessTokens>> join_tokens =
      AccessTokens::Create("join", flags.worker_token, flags.worker_token_file);
  if (!join_tokens.ok()) return Fail(err, join_tokens.status());

  (void)performer::ConfigureCpuThreads(static_cast<int>(flags.threads));
  // Metrics outlive the coordinator (its runners report events) and the servers (interceptors).
  base::MetricRegistry metrics_registry;
  CoordinatorMetrics metrics(&metrics_registry);
  rpc::RpcMetrics rpc_metrics(&metrics_registry, {v1::Coordinator::service_full_name()});
  base::AddProcessMetrics(&metrics_registry);
  if (absl::Status s = metrics_registry.registration_status(); !s.ok()) return FailStart(err, s.message());
  if (!flags.offload_dir.empty()) {
    // One small file now, so that a directory that cannot hold the moments stops the start instead
    // of failing every job (resumed ones included) at its first step.
    absl::StatusOr<std::unique_ptr<base::FileBackedMemory>> probe =
        base::FileBackedMemory::Create(flags.offload_dir, 1);
    if (!probe.ok()) return FailStart(err, absl::StrCat("--offload_dir: ", probe.status().message()));
    if (base::IsInMemoryFileSystem(flags.offload_dir)) {
      base::LogWarning("--offload_dir=", flags.offload_dir,
                       " is on a file system in memory (tmpfs): what is offloaded there still takes memory");
    }
  }
  CoordinatorOptions options;
  options.event_observer = [&metrics](const v1::JobEvent& event) { metrics.ObserveEvent(event); };
  options.state_dir = flags.state_dir;
  options.registry.heartbeat_interval = absl::Milliseconds(flags.heartbeat_interval_ms);
  options.registry.lost_after = absl::Milliseconds(flags.lost_after_ms);
  // Workers are reached over TLS verified against the CA that signed their certificates.
  const bool mutual_tls = tls->has_value() && !(*tls)->ca.empty();
  if (mutual_tls) options.registry.worker_channel_credentials = rpc::ChannelCredentials(*tls);
  options.runner.shard_timeout = absl::Seconds(flags.shard_timeout_seconds);
  options.runner.max_attempts = static_cast<int>(flags.max_attempts);
  options.runner.max_assembly_bytes = flags.max_assembly_bytes;
  options.runner.stream_into_sum_bytes = flags.stream_into_sum_bytes;
  options.runner.max_sequences_per_shard = flags.max_sequences_per_shard;
  options.runner.offload_directory = flags.offload_dir;
  options.upload_limit_bytes = flags.upload_limit_bytes;
  options.max_model_bytes = flags.max_model_bytes;
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator = Coordinator::Create(options);
  if (!coordinator.ok()) return FailStart(err, coordinator.status().message());
  metrics.CollectFrom(coordinator->get());

  CoordinatorService service(coordinator->get(), client_tokens->get(), join_tokens->get(), mutual_tls);
  rpc::EnableStandardServices();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, rpc::ServerCredentials(*tls, rpc::ClientCertificates::kRequest),
                           &port);
  builder.RegisterService(&service);
  rpc::ConfigureServerKeepalive(&builder);
  rpc_metrics.Install(&builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    (*coordinator)->Shutdown();
    return FailStart(err, absl::StrCat("cannot listen on ", flags.listen, " (address in use?)"));
  }
  const std::vector<std::string> served = {v1::Coordinator::service_full_name()};
  rpc::SetServing(server.get(), served, false);  // until the port file says it is ready
  const std::string bound = absl::StrCat(flags.listen.substr(0, flags.listen.rfind(':')), ":", port);
  base::LogInfo("serving on ", bound,
                tls->has_value() ? (mutual_tls ? " with mutual TLS" : " with TLS") : " in plaintext",
                ", state in ", flags.state_dir);
  auto stop_serving = [&] {
    server->Shutdown();
    (*coordinator)->Shutdown();
  };
  std::unique_ptr<StatusPage> page;
  std::unique_ptr<base::HttpServer> http;
  if (!flags.metrics_listen.empty()) {
    page = std::make_unique<StatusPage>(StatusPage::Options{coordinator->get(), client_tokens->get()});
    std::map<std::string, base::HttpHandler> routes = page->Routes();
    routes["/metrics"] = rpc::MetricsRoute(&metrics_registry);
    absl::StatusOr<std::unique_ptr<base::HttpServer>> started =
        rpc::StartHttpEndpoint(flags.metrics_listen, *tls, std::move(routes));
    if (!started.ok()) {
      stop_serving();
      return FailStart(err, started.status().message());
    }
    http = *std::move(started);
    base::LogInfo("metrics at ", http->tls() ? "https://" : "http://", http->address(),
                  "/metrics, the status page at /");
  }
  // The metrics address first: once --port_file exists, everything serves.
  for (const auto& [file, address] :
       {std::pair<std::string, std::string>{flags.metrics_port_file, http != nullptr ? http->address() : ""},
        {flags.port_file, bound}}) {
    if (file.empty()) continue;
    if (absl::Status written = base::WriteFileAtomically(file, address + "\n"); !written.ok()) {
      if (http != nullptr) http->Stop();
      stop_serving();
      return FailStart(err, written.message());
    }
  }

  rpc::SetServing(server.get(), served, true);
  Notify(base::NotifyReady(absl::StrCat("serving on ", bound)));

  int received = 0;
  while ((received = (*signals)->Wait()) == SIGHUP) {
    Notify(base::NotifyReloading());
    for (AccessTokens* tokens : {client_tokens->get(), join_tokens->get()}) {
      if (tokens->file().empty()) continue;
      absl::Status reloaded = tokens->Reload();
      if (reloaded.ok()) {
        base::LogInfo("SIGHUP: re-read ", tokens->file(), " (", tokens->size(), " tokens accepted)");
      } else {
        base::LogError("SIGHUP: ", reloaded.message(), "; the tokens in use stay");
      }
    }
    Notify(base::NotifyReady(absl::StrCat("serving on ", bound)));
  }
  base::LogInfo(base::SignalName(received), ": shutting down");
  Notify(base::NotifyStopping(base::SignalName(received)));
  rpc::SetServing(server.get(), served, false);
  if (http != nullptr) http->Stop();  // the page reads the coordinator
  (*coordinator)->Shutdown();         // runners stop first so streams to clients can end
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  coordinator->reset();
  base::LogInfo("stopped");
  return base::kExitOk;
}

}  // namespace

absl::StatusOr<ParsedCoordinatorFlags> ParseCoordinatorFlags(absl::Span<const std::string> args,
                                                             const CoordinatorEnvironment& env) {
  ParsedCoordinatorFlags parsed;
  CoordinatorDaemonOptions& o = parsed.options;
  base::FlagSet flags(
      "coordinator", "slimfit-coordinator --state_dir=DIR [flags]",
      "The slimfit coordinator: registers workers, runs fine-tuning jobs, keeps durable state.");
  flags.SetInvocation(kProgram);
  flags.ConfigFile("config",
                   "a TOML file of these flags, one `name = value` per line; the command line overrides it");
  flags.String("listen", &o.listen, "host:port to serve on (port 0: any free port)");
  flags.String("state_dir", &o.state_dir, "directory for the SQLite state, uploads and checkpoints",
               base::FlagSet::kRequired);
  flags.String("token", &o.token, "client token (default: $SLIMFIT_TOKEN)",
               base::FlagSet::kOptionalNoDefault);
  flags.String("token_file", &o.token_file, "file of client tokens, one per line, re-read on SIGHUP",
               base::FlagSet::kOptionalNoDefault);
  flags.String("worker_token", &o.worker_token,
               "join token: what a new worker presents once to register (default: $SLIMFIT_WORKER_TOKEN)",
               base::FlagSet::kOptionalNoDefault);
  flags.String("worker_token_file", &o.worker_token_file,
               "file of join tokens, one per line, re-read on SIGHUP", base::FlagSet::kOptionalNoDefault);
  rpc::AddTlsFlags(flags, rpc::TlsFlagSet::kDaemon, &o.tls);
  flags.Int("heartbeat_interval_ms", &o.heartbeat_interval_ms, "how often workers heartbeat");
  flags.Int("lost_after_ms", &o.lost_after_ms, "silence after which a worker is LOST");
  flags.Int("shard_timeout_seconds", &o.shard_timeout_seconds,
            "a shard's deadline: this plus 10x its predicted compute time");
  flags.Int("max_attempts", &o.max_attempts, "attempts per shard before the job fails");
  flags.Int("max_sequences_per_shard", &o.max_sequences_per_shard,
            "most sequences in one shard (0: as many as fit one request)");
  flags.ByteSize("max_assembly_bytes", &o.max_assembly_bytes,
                 "shard gradients a job holds while they stream in (a shard waits for room unless it is "
                 "alone): less memory for large models, at the cost of receiving their shards in turn");
  flags.ByteSize("stream_into_sum_bytes", &o.stream_into_sum_bytes,
                 "a shard gradient at least this large is summed as it arrives, no copy of it held (a "
                 "stream that fails midway costs its round, computed again); 0: every shard");
  flags.String("offload_dir", &o.offload_dir,
               "keep AdamW's moments and spot-checked shards' results (while they wait for their check) "
               "in unnamed files in this directory (on a disk, not tmpfs), resident only while a pass "
               "works on them: the coordinator's tensors are 2x the parameter bytes in every round, "
               "where in memory they are 4x (6x in a round with a spot check); each step passes over "
               "2x the parameter bytes more through the page cache or the disk",
               base::FlagSet::kOptionalNoDefault);
  flags.ByteSize("upload_limit", &o.upload_limit_bytes, "largest accepted upload");
  flags.ByteSize("max_model_bytes", &o.max_model_bytes,
                 "largest model a job may train: its parameters' bytes in the job's dtype (the coordinator "
                 "holds about 4x this (2x with --offload_dir), 1x more with compressed parameter "
                 "broadcasts, plus the gradients being assembled: up to --max_assembly_bytes, none of those "
                 "--stream_into_sum_bytes sums as they arrive, and 2x more for a spot-checked shard's two "
                 "results unless --offload_dir)");
  flags.String("port_file", &o.port_file, "write the bound host:port here once serving");
  rpc::AddMetricsFlags(flags, "Prometheus metrics (/metrics) and the status page (/)", &o.metrics_listen,
                       &o.metrics_port_file);
  flags.Int("threads", &o.threads, "BLAS threads for the optimizer step and checkpoints");
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help_requested()) {
    parsed.help = true;
    parsed.help_text = flags.Help();
    return parsed;
  }
  if (absl::Status s = rpc::ValidateAddress(o.listen, "--listen", true); !s.ok()) return s;
  if (!flags.IsSet("token") && env.token != nullptr) o.token = env.token;
  if (!flags.IsSet("worker_token") && env.worker_token != nullptr) o.worker_token = env.worker_token;
  if (o.state_dir.empty()) return absl::InvalidArgumentError("--state_dir is empty; expected a directory");
  if (o.token.empty() && o.token_file.empty()) {
    return absl::InvalidArgumentError("--token (or $SLIMFIT_TOKEN) or --token_file is required");
  }
  if (o.worker_token.empty() && o.worker_token_file.empty()) {
    return absl::InvalidArgumentError(
        "--worker_token (or $SLIMFIT_WORKER_TOKEN) or --worker_token_file is required");
  }
  if (!o.token.empty() && o.token == o.worker_token) {
    return absl::InvalidArgumentError("--token and --worker_token must differ");
  }
  if (absl::Status s = rpc::CheckListenSecurity(o.listen, o.tls, "--listen"); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  if (o.tls.cert_file.empty() != o.tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!o.tls.ca_file.empty() && o.tls.cert_file.empty()) {
    return absl::InvalidArgumentError("--tls_ca needs --tls_cert and --tls_key (the coordinator serves TLS)");
  }
  if (o.heartbeat_interval_ms < 10 || o.lost_after_ms < 2 * o.heartbeat_interval_ms) {
    return absl::InvalidArgumentError(
        "--heartbeat_interval_ms must be ≥ 10 and --lost_after_ms at least twice it");
  }
  if (o.shard_timeout_seconds < 1) return absl::InvalidArgumentError("--shard_timeout_seconds must be ≥ 1");
  if (o.max_attempts < 1) return absl::InvalidArgumentError("--max_attempts must be ≥ 1");
  if (o.max_assembly_bytes < 1) return absl::InvalidArgumentError("--max_assembly_bytes must be ≥ 1");
  if (o.stream_into_sum_bytes < 0) return absl::InvalidArgumentError("--stream_into_sum_bytes must be ≥ 0");
  if (o.max_sequences_per_shard < 0)
    return absl::InvalidArgumentError("--max_sequences_per_shard must be ≥ 0");
  if (o.max_model_bytes < 1) return absl::InvalidArgumentError("--max_model_bytes must be ≥ 1 byte");
  if (o.threads < 1 || o.threads > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", o.threads, ": expected 1 to 4096"));
  }
  if (flags.IsSet("port_file") && o.port_file.empty()) {
    return absl::InvalidArgumentError("--port_file is empty; expected a file");
  }
  if (absl::Status s = rpc::CheckMetricsFlags(o.metrics_listen, o.metrics_port_file, o.tls); !s.ok()) {
    return s;
  }
  return parsed;
}

int CoordinatorMain(const std::vector<std::string>& args, const CoordinatorEnvironment& env,
                    std::ostream& out, std::ostream& err) {
  absl::StatusOr<ParsedCoordinatorFlags> parsed = ParseCoordinatorFlags(args, env);
  if (!parsed.ok()) return Fail(err, parsed.status());
  if (parsed->help) {
    out << parsed->help_text << std::flush;
    return base::kExitOk;
  }
  return Run(parsed->options, err);
}

}  // namespace slimfit::server
