// slimfit-coordinator: the coordinator daemon. Registers workers, runs jobs (plans per worker,
// speed-proportional shards, aggregation, optimizer steps), keeps durable state in --state_dir and
// serves the Coordinator gRPC service (proto/slimfit.proto) on --listen.
//
//   slimfit-coordinator --state_dir=/var/lib/slimfit --listen=0.0.0.0:50051
//       --token=$CLIENT_TOKEN --worker_token=$WORKER_TOKEN   (or $SLIMFIT_TOKEN, $SLIMFIT_WORKER_TOKEN)
//
// SIGTERM/SIGINT: stops accepting calls, stops the job runners (jobs stay RUNNING in the state
// directory and resume from their latest checkpoint at the next start) and exits 0. Bad flags:
// one line "slimfit-coordinator: <message>" on stderr and exit status 2; a start-up failure
// (state directory, port in use): one line and exit status 1.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/command.h"
#include "client/flags_util.h"
#include "performer/cpu_runtime.h"
#include "proto/atomic_file.h"
#include "proto/log.h"
#include "proto/rpc_util.h"
#include "server/coordinator.h"
#include "server/coordinator_service.h"

namespace {

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string state_dir;
  std::string token;
  std::string worker_token;
  int64_t heartbeat_interval_ms = 1000;
  int64_t lost_after_ms = 5000;
  int64_t shard_timeout_seconds = 120;
  int64_t max_attempts = 5;
  int64_t upload_limit = int64_t{1} << 30;
  std::string port_file;
  int64_t threads = 1;
};

std::string EnvOr(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// The self-pipe: OnSignal writes the signal number to signal_pipe[1].
int signal_pipe[2] = {-1, -1};

extern "C" void OnSignal(int signal_number) {
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  ssize_t ignored = write(signal_pipe[1], &byte, 1);
  (void)ignored;
}

int Fail(int code, absl::string_view message) {
  std::cerr << slimfit::client::FormatErrorLine(message).replace(0, 7, "slimfit-coordinator");
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace slimfit;
  Flags flags;
  flags.token = EnvOr("SLIMFIT_TOKEN");
  flags.worker_token = EnvOr("SLIMFIT_WORKER_TOKEN");
  client::FlagSet parser("coordinator", "slimfit-coordinator --state_dir=DIR [flags]",
                         "The slimfit coordinator: registers workers, runs fine-tuning jobs, keeps durable state.");
  parser.SetInvocation("slimfit-coordinator");
  parser.String("listen", &flags.listen, "host:port to serve on (port 0: any free port)");
  parser.String("state_dir", &flags.state_dir, "directory for the SQLite state, uploads and checkpoints",
                client::FlagSet::kRequired);
  parser.String("token", &flags.token, "client token (default: $SLIMFIT_TOKEN)");
  parser.String("worker_token", &flags.worker_token, "worker token (default: $SLIMFIT_WORKER_TOKEN)");
  parser.Int("heartbeat_interval_ms", &flags.heartbeat_interval_ms, "how often workers heartbeat");
  parser.Int("lost_after_ms", &flags.lost_after_ms, "silence after which a worker is LOST");
  parser.Int("shard_timeout_seconds", &flags.shard_timeout_seconds,
             "a shard's deadline: this plus 10x its predicted compute time");
  parser.Int("max_attempts", &flags.max_attempts, "attempts per shard before the job fails");
  parser.ByteSize("upload_limit", &flags.upload_limit, "largest accepted upload");
  parser.String("port_file", &flags.port_file, "write the bound host:port here once serving");
  parser.Int("threads", &flags.threads, "BLAS threads for the optimizer step and checkpoints");
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (absl::Status parsed = parser.Parse(args); !parsed.ok()) return Fail(2, parsed.message());
  if (parser.help_requested()) {
    std::cout << parser.Help();
    return 0;
  }
  if (absl::Status address = rpc::ValidateAddress(flags.listen, "--listen", true); !address.ok()) {
    return Fail(2, address.message());
  }
  if (flags.token.empty()) return Fail(2, "--token (or $SLIMFIT_TOKEN) is required");
  if (flags.worker_token.empty()) return Fail(2, "--worker_token (or $SLIMFIT_WORKER_TOKEN) is required");
  if (flags.token == flags.worker_token) return Fail(2, "--token and --worker_token must differ");
  if (flags.heartbeat_interval_ms < 10 || flags.lost_after_ms < 2 * flags.heartbeat_interval_ms) {
    return Fail(2, "--heartbeat_interval_ms must be ≥ 10 and --lost_after_ms at least twice it");
  }
  if (flags.shard_timeout_seconds < 1) return Fail(2, "--shard_timeout_seconds must be ≥ 1");
  if (flags.max_attempts < 1) return Fail(2, "--max_attempts must be ≥ 1");
  if (flags.threads < 1) return Fail(2, "--threads must be ≥ 1");

  // Signals: the handler only writes the signal number to a pipe (async-signal-safe) and the main
  // thread reads it. (Blocking the signals and sigwait-ing would not do: OpenBLAS starts threads
  // before main, and a signal delivered to one of them would kill the process.)
  if (pipe2(signal_pipe, O_CLOEXEC) != 0) return Fail(1, "cannot create the signal pipe");
  fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK);
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  rpc::SetLogComponent("coordinator");
  (void)performer::ConfigureCpuThreads(static_cast<int>(flags.threads));
  server::CoordinatorOptions options;
  options.state_dir = flags.state_dir;
  options.worker_token = flags.worker_token;
  options.registry.heartbeat_interval = absl::Milliseconds(flags.heartbeat_interval_ms);
  options.registry.lost_after = absl::Milliseconds(flags.lost_after_ms);
  options.runner.shard_timeout = absl::Seconds(flags.shard_timeout_seconds);
  options.runner.max_attempts = static_cast<int>(flags.max_attempts);
  options.upload_limit_bytes = flags.upload_limit;
  absl::StatusOr<std::unique_ptr<server::Coordinator>> coordinator = server::Coordinator::Create(options);
  if (!coordinator.ok()) return Fail(1, coordinator.status().message());

  server::CoordinatorService service(coordinator->get(), flags.token, flags.worker_token);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    (*coordinator)->Shutdown();
    return Fail(1, absl::StrCat("cannot listen on ", flags.listen, " (address in use?)"));
  }
  const std::string bound = absl::StrCat(flags.listen.substr(0, flags.listen.rfind(':')), ":", port);
  rpc::LogInfo("serving on ", bound, ", state in ", flags.state_dir);
  if (!flags.port_file.empty()) {
    if (absl::Status written = WriteFileAtomically(flags.port_file, bound + "\n"); !written.ok()) {
      server->Shutdown();
      (*coordinator)->Shutdown();
      return Fail(1, written.message());
    }
  }

  unsigned char received = 0;
  while (read(signal_pipe[0], &received, 1) < 0 && errno == EINTR) {
  }
  rpc::LogInfo("received ", received == SIGTERM ? "SIGTERM" : "SIGINT", ": shutting down");
  (*coordinator)->Shutdown();  // runners stop first so streams to clients can end
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  coordinator->reset();
  rpc::LogInfo("stopped");
  return 0;
}
