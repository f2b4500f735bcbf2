#include "worker/worker_daemon.h"

#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "base/exit_status.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/http_server.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/process_memory.h"
#include "base/process_metrics.h"
#include "base/service_notify.h"
#include "base/signal_pipe.h"
#include "base/thread.h"
#include "performer/cpu_runtime.h"
#include "performer/device.h"
#include "planner/calibration.h"
#include "planner/device_profile_io.h"
#include "planner/plan_search.h"
#include "proto/slimfit.grpc.pb.h"
#include "rpc/http_endpoint.h"
#include "rpc/rpc_metrics.h"
#include "rpc/rpc_util.h"
#include "rpc/standard_services.h"
#include "worker/coordinator_link.h"
#include "worker/parameter_cache.h"
#include "worker/worker_identity.h"
#include "worker/worker_metrics.h"
#include "worker/worker_service.h"
#include "worker/worker_state.h"

namespace slimfit::worker {
namespace {

constexpr char kProgram[] = "slimfit-worker";
constexpr char kTokenEnv[] = "SLIMFIT_WORKER_TOKEN";
// Calibration and the profile cache use float32, the planner's default dtype.
constexpr performer::DType kProfileDType = performer::DType::kFloat32;

// Prints "slimfit-worker: <message>" as one line; the exit status for `status`.
int Fail(std::ostream& err, const absl::Status& status) {
  err << base::FormatErrorLine(kProgram, status.message()) << std::flush;
  return base::ExitCodeForStatus(status);
}

// What ends the daemon: a signal (OK status) or a fatal error. The first request wins.
class ShutdownRequest {
 public:
  void Request(std::string reason, absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (requested_) return;
    requested_ = true;
    reason_ = std::move(reason);
    status_ = std::move(status);
  }
  bool requested() const {
    absl::MutexLock lock(&mu_);
    return requested_;
  }
  // Blocks until Request; the reason and status.
  std::pair<std::string, absl::Status> Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&requested_));
    return {reason_, status_};
  }

 private:
  mutable absl::Mutex mu_;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// A failure to tell systemd is logged, never fatal.
void Notify(const absl::Status& status) {
  if (!status.ok()) base::LogWarning(status.message());
}

// The host part of host:port ("127.0.0.1", "[::1]").
std::string HostOf(const std::string& address) { return address.substr(0, address.rfind(':')); }

absl::Time ModificationTime(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return absl::Now();
  return absl::TimeFromTimespec(info.st_mtim);
}

struct LoadedProfile {
  planner::DeviceProfile profile;
  absl::Time calibrated_at;
};

// --profile, the state directory's cached profile, or a fresh calibration (then cached).
absl::StatusOr<LoadedProfile> LoadOrCalibrate(const WorkerDaemonOptions& options, const StateDir& state) {
  if (!options.profile.empty()) {
    absl::StatusOr<planner::DeviceProfile> profile = planner::ReadDeviceProfile(options.profile);
    if (!profile.ok()) {
      return absl::Status(profile.status().code(), absl::StrCat("--profile: ", profile.status().message()));
    }
    base::LogInfo("using the device profile ", options.profile, " (no calibration)");
    return LoadedProfile{*std::move(profile), ModificationTime(options.profile)};
  }
  const ProfileKey key{options.device, static_cast<int>(options.threads), kProfileDType, options.cuda_graphs};
  absl::StatusOr<std::optional<CachedProfile>> cached = state.LoadProfile(key);
  if (!cached.ok()) {
    base::LogWarning("ignoring the cached profile: ", cached.status().message());
  } else if (cached->has_value()) {
    base::LogInfo("using the profile cached in ", state.path(), " (", key.ToString(), ", calibrated ",
                  absl::FormatTime(absl::RFC3339_sec, (*cached)->calibrated_at, absl::UTCTimeZone()), ")");
    return LoadedProfile{(*cached)->profile, (*cached)->calibrated_at};
  }
  base::LogInfo("calibrating ", key.ToString(), " with short probes of the engine (10 to 30 s)...");
  planner::CalibrationOptions calibration;
  calibration.device = options.device;
  calibration.threads = static_cast<int>(options.threads);
  calibration.dtype = kProfileDType;
  calibration.slice_replay =
      options.cuda_graphs ? performer::SliceReplay::kAuto : performer::SliceReplay::kOff;
  const absl::Time start = absl::Now();
  absl::StatusOr<planner::CalibrationResult> result = planner::Calibrate(calibration);
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat("calibrating ", options.device, ": ", result.status().message()));
  }
  const absl::Time calibrated_at = absl::Now();
  const planner::DeviceProfile& profile = result->profile;
  const std::string bf16 =
      profile.bf16_flops_per_second > 0
          ? absl::StrFormat("bfloat16 products %.2f GFLOP/s (a full gradient %.2f× its float32 time)",
                            profile.bf16_flops_per_second / 1e9, result->bf16_call_time_ratio)
          : std::string("bfloat16 products unmeasured");
  base::LogInfo(absl::StrFormat("calibrated in %.1f s: %.2f GFLOP/s, %s, activation scale %.3f",
                                absl::ToDoubleSeconds(calibrated_at - start), profile.flops_per_second / 1e9,
                                bf16, profile.activation_scale));
  for (const std::string& warning : result->Warnings()) base::LogWarning(warning);
  if (absl::Status s = state.StoreProfile(key, result->profile, calibrated_at); !s.ok()) {
    base::LogWarning("cannot cache the profile (the next start calibrates again): ", s.message());
  }
  return LoadedProfile{result->profile, calibrated_at};
}

int Run(const WorkerDaemonOptions& options, std::ostream& err) {
  // Before any thread of ours exists: the allocator's settings hold for every thread.
  base::RetainFreedHeapMemory();
  // Signals reach a thread of ours through a pipe (base/signal_pipe.h).
  absl::StatusOr<std::unique_ptr<base::SignalPipe>> signals =
      base::SignalPipe::Install({SIGTERM, SIGINT, SIGHUP});
  if (!signals.ok()) return Fail(err, signals.status());
  ShutdownRequest shutdown;
  // The service the signal thread may act on; the mutex makes "load and call" and "clear before
  // the service is destroyed" exclusive.
  absl::Mutex running_service_mutex;
  std::atomic<WorkerService*> running_service{nullptr};
  base::Thread signal_thread("signals", [&] {
    int received = 0;
    for (int signal; (signal = (*signals)->Wait()) != 0;) {
      const std::string name = base::SignalName(signal);
      if (signal == SIGHUP) {
        base::LogInfo(
            "SIGHUP: nothing to re-read (budget, device and threads are fixed at registration; restart "
            "the worker to change them)");
        continue;
      }
      if (++received == 1) {
        base::LogInfo(name, ": shutting down (the running shard may finish for up to ",
                      absl::FormatDuration(kDrainTimeout), "; a second signal abandons it)");
        shutdown.Request(name, absl::OkStatus());
      } else {
        absl::MutexLock lock(&running_service_mutex);
        if (WorkerService* service = running_service.load()) {
          base::LogWarning(name, " again: abandoning the running shard");
          service->CancelCurrentShard();
        }
      }
    }
    return absl::OkStatus();
  });
  struct StopSignalThread {
    base::SignalPipe* signals;
    base::Thread* thread;
    ~StopSignalThread() {
      signals->Wake();
      if (absl::Status ended = thread->Join(); !ended.ok()) base::LogError(ended.message());
    }
  } stop_signal_thread{signals->get(), &signal_thread};

  base::SetLogComponent("worker");
  absl::StatusOr<c10::Device> device = performer::ParseDevice(options.device);
  if (!device.ok()) return Fail(err, device.status());
  if (device->is_cpu()) {
    if (absl::Status s = performer::ConfigureCpuThreads(static_cast<int>(options.threads)); !s.ok()) {
      return Fail(err, s);
    }
  }
  absl::StatusOr<StateDir> state = StateDir::Open(options.state_dir);
  if (!state.ok()) return Fail(err, state.status());
  absl::StatusOr<std::string> credential = state->ReadCredential();
  if (!credential.ok()) return Fail(err, credential.status());
  if (credential->empty() && options.token.empty()) {
    return Fail(err,
                absl::InvalidArgumentError(absl::StrCat(
                    "this worker has not joined yet: give the join token with --token or $", kTokenEnv)));
  }
  // Local datasets before calibration: a bad file is reported at once.
  absl::StatusOr<LocalDatasets> local_datasets =
      LocalDatasets::Load(options.local_data, options.local_data_format);
  if (!local_datasets.ok()) return Fail(err, local_datasets.status());
  for (const v1::LocalDataset& dataset : local_datasets->announcements()) {
    base::LogInfo("local dataset ", dataset.name(), ": ", local_datasets->PathOf(dataset.name()), ", ",
                  dataset.tokens(), " tokens in ", dataset.documents(), " documents, sha256 ",
                  dataset.sha256());
  }
  absl::StatusOr<LoadedProfile> profile = LoadOrCalibrate(options, *state);
  if (!profile.ok()) return Fail(err, profile.status());
  if (shutdown.requested()) {
    base::LogInfo("stopped before serving");
    return 0;
  }

  absl::StatusOr<std::optional<rpc::TlsMaterial>> tls = rpc::LoadTls(options.tls);
  if (!tls.ok()) return Fail(err, tls.status());
  WorkerIdentity identity(options.token, *credential);
  // The coordinator is reached over TLS verified against --tls_ca, presenting our certificate.
  const bool tls_to_coordinator = tls->has_value() && !(*tls)->ca.empty();
  std::shared_ptr<v1::Coordinator::StubInterface> coordinator = v1::Coordinator::NewStub(rpc::MakeChannel(
      options.coordinator, rpc::ChannelCredentials(tls_to_coordinator ? *tls : std::nullopt)));
  ParameterCache::Options cache_options;
  cache_options.coordinator = coordinator;
  cache_options.identity = &identity;
  cache_options.device = *device;
  ParameterCache cache(cache_options);
  WorkerService::Options service_options;
  service_options.identity = &identity;
  service_options.profile = profile->profile;
  service_options.calibrated_at = profile->calibrated_at;
  service_options.memory_budget_bytes = options.memory_budget_bytes;
  service_options.device = options.device;
  service_options.threads = static_cast<int>(options.threads);
  service_options.cuda_graphs = options.cuda_graphs;
  service_options.cache = &cache;
  service_options.local_steps_dir = state->path() + "/local-steps";
  LocalDataReader local_data(&*local_datasets);
  if (!local_datasets->announcements().empty()) service_options.local_data = &local_data;
  WorkerService service(service_options);

  // Metrics: summaries of ComputeGradient as they are sent, and what the worker holds at each scrape.
  base::MetricRegistry metrics_registry;
  WorkerMetrics metrics(&metrics_registry);
  rpc::RpcMetrics rpc_metrics(&metrics_registry, {v1::Worker::service_full_name()});
  base::AddProcessMetrics(&metrics_registry);
  rpc_metrics.ObserveSent("/slimfit.v1.Worker/ComputeGradient",
                          [&metrics](const google::protobuf::Message& message) {
                            const auto* response = dynamic_cast<const v1::ComputeGradientResponse*>(&message);
                            if (response != nullptr && response->has_summary())
                              metrics.ObserveSummary(response->summary());
                          });
  WorkerMetrics::Identity identity_metrics;
  identity_metrics.worker_id = [&service] { return service.worker_id(); };
  identity_metrics.device = options.device;
  identity_metrics.version = kWorkerVersion;
  identity_metrics.memory_budget_bytes = options.memory_budget_bytes;
  identity_metrics.parameter_cache_bytes = [&cache] { return cache.Bytes(); };
  metrics.CollectFrom(std::move(identity_metrics));
  if (absl::Status s = metrics_registry.registration_status(); !s.ok())
    return Fail(err, absl::InternalError(s.message()));

  rpc::EnableStandardServices();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, rpc::ServerCredentials(*tls, rpc::ClientCertificates::kRequire),
                           &port);
  builder.RegisterService(&service);
  rpc::ConfigureServerKeepalive(&builder);
  rpc_metrics.Install(&builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail(err, absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                                         " (address in use or not local?)")));
  }
  const std::vector<std::string> served = {v1::Worker::service_full_name()};
  rpc::SetServing(server.get(), served, false);  // until registered
  running_service.store(&service);
  // Declared after `service`, so destroyed before it on every return path.
  struct ClearRunningService {
    absl::Mutex* mutex;
    std::atomic<WorkerService*>* service;
    ~ClearRunningService() {
      absl::MutexLock lock(mutex);
      service->store(nullptr);
    }
  } clear_running_service{&running_service_mutex, &running_service};
  const std::string host = HostOf(options.listen);
  const std::string bound = absl::StrCat(host, ":", port);
  const std::string advertise = options.advertise.empty() ? bound : options.advertise;
  if (options.advertise.empty() && (host == "0.0.0.0" || host == "[::]")) {
    base::LogWarning("advertising ", advertise, ", which the coordinator cannot reach: set --advertise");
  }
  base::LogInfo("serving on ", bound, " (advertised as ", advertise, "): device ", options.device,
                ", budget ", planner::HumanBytes(static_cast<double>(options.memory_budget_bytes)), ", ",
                options.threads, " thread", options.threads == 1 ? "" : "s");
  std::unique_ptr<base::HttpServer> http;
  auto stop_server = [&] {
    {
      absl::MutexLock lock(&running_service_mutex);
      running_service.store(nullptr);
    }
    if (http != nullptr) http->Stop();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  };
  if (!options.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<base::HttpServer>> started = rpc::StartHttpEndpoint(
        options.metrics_listen, *tls, {{"/metrics", rpc::MetricsRoute(&metrics_registry)}});
    if (!started.ok()) {
      stop_server();
      return Fail(err, started.status());
    }
    http = *std::move(started);
    base::LogInfo("metrics at ", http->tls() ? "https://" : "http://", http->address(), "/metrics");
  }
  for (const auto& [flag, file, address] :
       {std::tuple<const char*, std::string, std::string>{"--metrics_port_file", options.metrics_port_file,
                                                          http != nullptr ? http->address() : ""},
        {"--port_file", options.port_file, bound}}) {
    if (file.empty()) continue;
    if (absl::Status s = base::WriteFileAtomically(file, address + "\n"); !s.ok()) {
      stop_server();
      return Fail(err, absl::Status(s.code(), absl::StrCat(flag, ": ", s.message())));
    }
  }
  Notify(base::NotifyReady(absl::StrCat("serving on ", bound, "; registering with ", options.coordinator)));

  CoordinatorLink::Options link_options;
  link_options.coordinator = coordinator;
  link_options.coordinator_address = options.coordinator;
  link_options.identity = &identity;
  if (tls->has_value()) {
    link_options.unavailable_hint =
        " — with TLS, check that the coordinator's --tls_ca signed this worker's certificate and that it has "
        "not "
        "expired, and that this worker's --tls_ca signed the coordinator's";
  }
  v1::RegisterWorkerRequest& registration = link_options.registration;
  *registration.mutable_profile() = planner::DeviceProfileToProto(profile->profile);
  registration.set_memory_budget_bytes(options.memory_budget_bytes);
  registration.set_device(options.device);
  registration.set_advertise_address(advertise);
  registration.set_threads(static_cast<int32_t>(options.threads));
  registration.set_version(kWorkerVersion);
  for (const v1::LocalDataset& dataset : local_datasets->announcements())
    *registration.add_local_datasets() = dataset;
  link_options.state = &*state;
  link_options.service = &service;
  link_options.cache = &cache;
  link_options.on_stop = [&shutdown](const absl::Status& status) {
    if (absl::IsPermissionDenied(status)) {
      shutdown.Request("revoked",
                       absl::PermissionDeniedError(absl::StrCat(
                           "stopped serving: the coordinator refuses this worker (", status.message(), ")")));
      return;
    }
    shutdown.Request("superseded",
                     absl::FailedPreconditionError(
                         absl::StrCat("stopped serving: this worker's registration was superseded by another "
                                      "process with the same id (",
                                      status.message(), ")")));
  };
  CoordinatorLink link(link_options);
  std::atomic<bool> registered{false};
  base::Thread registrar("registrar", [&] {
    const absl::Status status = link.Register();
    if (status.ok()) {
      link.StartHeartbeats();
      registered.store(true);
      rpc::SetServing(server.get(), served, true);
      Notify(base::NotifyStatus(absl::StrCat("registered as ", service.worker_id(), "; serving on ", bound)));
    } else if (!absl::IsCancelled(status)) {
      shutdown.Request("registration failed", status);
    }
    return absl::OkStatus();
  });

  const auto [reason, status] = shutdown.Wait();
  Notify(base::NotifyStopping(absl::StrCat("draining (", reason, ")")));
  service.StartDraining();
  rpc::SetServing(server.get(), served, false);
  if (status.ok()) {
    link.HeartbeatNow();  // report DRAINING at once
    if (!service.WaitUntilIdle(kDrainTimeout)) {
      base::LogWarning("the running shard did not finish within ", absl::FormatDuration(kDrainTimeout),
                       ": abandoning it");
      service.CancelCurrentShard();
      service.WaitUntilIdle(absl::Seconds(10));
    }
  } else {
    service.CancelCurrentShard();
  }
  link.Stop();
  if (absl::Status ended = registrar.Join(); !ended.ok()) base::LogError(ended.message());
  if (status.ok() && registered.load()) {
    if (absl::Status s = link.Deregister(reason, absl::Seconds(5)); !s.ok()) {
      base::LogWarning(s.message());
    }
  }
  stop_server();
  if (!status.ok()) return Fail(err, status);
  base::LogInfo("stopped (", reason, ")");
  return 0;
}

}  // namespace

absl::StatusOr<ParsedFlags> ParseWorkerFlags(absl::Span<const std::string> args, const char* env_token) {
  ParsedFlags parsed;
  WorkerDaemonOptions& o = parsed.options;
  base::FlagSet flags(
      "worker",
      "slimfit-worker --coordinator=HOST:PORT --memory_budget=BYTES --state_dir=DIR [--token=T] [flags]",
      "The slimfit worker daemon: registers with the coordinator and computes exact gradients of\n"
      "shards within its memory budget. The token may come from $SLIMFIT_WORKER_TOKEN instead of\n"
      "--token. SIGTERM or SIGINT: finish the running shard (up to 30 s), deregister, exit 0.");
  flags.SetInvocation("slimfit-worker");
  flags.ConfigFile("config",
                   "a TOML file of these flags, one `name = value` per line; the command line overrides it");
  flags.String("coordinator", &o.coordinator, "the coordinator's host:port", base::FlagSet::kRequired);
  flags.String("listen", &o.listen, "host:port to serve the Worker service on; port 0 picks a free one");
  flags.String("advertise", &o.advertise,
               "host:port the coordinator reaches this worker at (default: the listen host and bound port)");
  flags.String("device", &o.device, "cpu, or cuda:N with a CUDA build of LibTorch");
  flags.ByteSize("memory_budget", &o.memory_budget_bytes,
                 "most tensor bytes one gradient call may use, e.g. 512MiB (plans keep a 10% margin)",
                 base::FlagSet::kRequired);
  flags.Int("threads", &o.threads, "compute threads");
  flags.Bool("cuda_graphs", &o.cuda_graphs,
             "on a GPU, run slices that repeat a shape as replayed CUDA graphs (false: op by op; "
             "graphs keep about one slice's scratch memory more)");
  flags.String("state_dir", &o.state_dir, "directory for the worker id and the calibrated profile (created)",
               base::FlagSet::kRequired);
  flags.String("token", &o.token,
               "the join token, needed until the state directory holds a credential (default: "
               "$SLIMFIT_WORKER_TOKEN)",
               base::FlagSet::kOptionalNoDefault);
  rpc::AddTlsFlags(flags, rpc::TlsFlagSet::kDaemon, &o.tls);
  flags.String("profile", &o.profile, "a text-format DeviceProfile to use instead of calibrating");
  flags.String("port_file", &o.port_file,
               "once serving, write the bound host:port to this file (atomically)");
  rpc::AddMetricsFlags(flags, "Prometheus metrics (/metrics)", &o.metrics_listen, &o.metrics_port_file);
  std::string data, data_type = "text", data_separator;
  flags.String("data", &data,
               "NAME=PATH[,NAME=PATH...]: datasets that stay on this worker; it announces their names, token "
               "and document counts and SHA-256, never their bytes");
  flags.String("data_type", &data_type,
               "how --data files are read: text, uint8, uint16 or uint32 (token ids)");
  flags.String(
      "data_separator", &data_separator,
      "bytes that end one document of a --data file and start the next, C escapes allowed ('\\n\\n'); "
      "default: each file is one document");
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help_requested()) {
    parsed.help = true;
    parsed.help_text = flags.Help();
    return parsed;
  }
  if (absl::Status s = rpc::ValidateAddress(o.coordinator, "--coordinator", false); !s.ok()) return s;
  if (absl::Status s = rpc::ValidateAddress(o.listen, "--listen", true); !s.ok()) return s;
  if (flags.IsSet("advertise")) {
    if (absl::Status s = rpc::ValidateAddress(o.advertise, "--advertise", false); !s.ok()) return s;
  }
  if (o.memory_budget_bytes <= 0)
    return absl::InvalidArgumentError("--memory_budget must be more than 0 bytes");
  if (o.threads < 1 || o.threads > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", o.threads, ": expected 1 to 4096"));
  }
  if (o.state_dir.empty()) return absl::InvalidArgumentError("--state_dir is empty; expected a directory");
  if (o.device.empty()) return absl::InvalidArgumentError("--device is empty; expected cpu or cuda:N");
  if (flags.IsSet("profile") && o.profile.empty()) {
    return absl::InvalidArgumentError("--profile is empty; expected a file");
  }
  if (flags.IsSet("port_file") && o.port_file.empty()) {
    return absl::InvalidArgumentError("--port_file is empty; expected a file");
  }
  absl::StatusOr<std::vector<LocalDataSpec>> local_data = ParseLocalDataFlag(data);
  if (!local_data.ok()) return local_data.status();
  o.local_data = *std::move(local_data);
  absl::StatusOr<rpc::DatasetFormat> format =
      rpc::ParseDatasetFormat(data_type, data_separator, "data_type", "data_separator");
  if (!format.ok()) return format.status();
  o.local_data_format = *std::move(format);
  if (!flags.IsSet("token") && env_token != nullptr) o.token = env_token;
  if (absl::Status s = rpc::CheckListenSecurity(o.listen, o.tls, "--listen"); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  if (o.tls.cert_file.empty() != o.tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!o.tls.ca_file.empty() && o.tls.cert_file.empty()) {
    return absl::InvalidArgumentError("--tls_ca needs --tls_cert and --tls_key (the worker serves TLS)");
  }
  if (absl::Status s = rpc::CheckMetricsFlags(o.metrics_listen, o.metrics_port_file, o.tls); !s.ok()) {
    return s;
  }
  return parsed;
}

int WorkerMain(const std::vector<std::string>& args, const char* env_token, std::ostream& out,
               std::ostream& err) {
  absl::StatusOr<ParsedFlags> parsed = ParseWorkerFlags(args, env_token);
  if (!parsed.ok()) return Fail(err, parsed.status());
  if (parsed->help) {
    out << parsed->help_text << std::flush;
    return 0;
  }
  return Run(parsed->options, err);
}

}  // namespace slimfit::worker
