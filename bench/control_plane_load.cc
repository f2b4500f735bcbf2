// control_plane_load: loads a running coordinator with a fleet of simulated workers
// (bench/simulated_fleet.h: the real worker components, N of them in this process) and a few
// clients, and reports the client-side latency of its control RPCs and what it cost the coordinator.
//
//   control_plane_load --coordinator=HOST:PORT --coordinator_pid=PID --job=JOB --profile=FILE
//                      --state_dir=DIR [--workers=64] [--duration_seconds=60] [--clients=4]
//                      [--client_interval_ms=250] [--memory_budget=64MiB] [--target_p99_ms=100] [--json]
//
// What happens: the N workers register all at once (join token from $SLIMFIT_WORKER_TOKEN), then
// heartbeat at the coordinator's interval and compute shards of JOB (submitted beforehand, e.g. with
// --min_workers=N) for --duration_seconds; meanwhile each of --clients clients (client token from
// $SLIMFIT_TOKEN) calls GetJob(JOB) and ListWorkers every --client_interval_ms. Then every worker
// deregisters. Every call is timed on the caller's side (bench/rpc_latency.h), from sending to the
// status. The coordinator's CPU seconds over the whole run and its peak resident memory (VmHWM)
// come from /proc/PID (bench/process_usage.h). bench/control_plane_load.sh starts the coordinator,
// submits the job and runs this.
//
// Exit status 0 when the p99 of RegisterWorker, Heartbeat, GetJob and ListWorkers are all below
// --target_p99_ms, 1 when one is not (or a call failed), 2 for a usage error; a failure to set up
// is one line "control_plane_load: <message>" on stderr.
#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/exit_status.h"
#include "base/flags.h"
#include "base/process_memory.h"
#include "bench/process_usage.h"
#include "bench/rpc_latency.h"
#include "bench/simulated_fleet.h"
#include "performer/cpu_runtime.h"
#include "planner/device_profile_io.h"
#include "proto/slimfit.grpc.pb.h"
#include "rpc/rpc_util.h"

namespace slimfit::bench {
namespace {

constexpr char kProgram[] = "control_plane_load";
// The RPCs the target is about, in the order they are reported.
const std::vector<std::string> kControlRpcs = {"RegisterWorker", "Heartbeat", "GetJob", "ListWorkers"};

struct Options {
  std::string coordinator;
  int64_t coordinator_pid = 0;
  std::string job_id;
  std::string profile_path;
  std::string state_dir;
  int64_t workers = 64;
  int64_t duration_seconds = 60;
  int64_t clients = 4;
  int64_t client_interval_ms = 250;
  int64_t memory_budget_bytes = int64_t{64} << 20;
  double target_p99_ms = 100;
  bool json = false;
  std::string client_token;
  std::string join_token;
};

absl::Status ParseOptions(const std::vector<std::string>& args, Options* o, bool* help) {
  base::FlagSet flags(kProgram,
                      "control_plane_load --coordinator=HOST:PORT --coordinator_pid=PID --job=JOB "
                      "--profile=FILE --state_dir=DIR [flags]",
                      "Loads a coordinator with simulated workers and clients; reports control-RPC latency.");
  flags.SetInvocation(kProgram);
  flags.String("coordinator", &o->coordinator, "the coordinator's host:port", base::FlagSet::kRequired);
  flags.Int("coordinator_pid", &o->coordinator_pid, "its process id, for CPU and memory (/proc)",
            base::FlagSet::kRequired);
  flags.String("job", &o->job_id, "the job the workers compute and the clients ask about",
               base::FlagSet::kRequired);
  flags.String("profile", &o->profile_path, "the workers' device profile (slimfit calibrate --out)",
               base::FlagSet::kRequired);
  flags.String("state_dir", &o->state_dir, "where the workers keep their ids and credentials",
               base::FlagSet::kRequired);
  flags.Int("workers", &o->workers, "simulated workers");
  flags.Int("duration_seconds", &o->duration_seconds, "how long the fleet works once registered");
  flags.Int("clients", &o->clients, "clients calling GetJob and ListWorkers");
  flags.Int("client_interval_ms", &o->client_interval_ms, "each client's pause between its two calls");
  flags.ByteSize("memory_budget", &o->memory_budget_bytes, "each worker's memory budget");
  flags.Double("target_p99_ms", &o->target_p99_ms, "the control RPCs' p99 must be below this");
  flags.Bool("json", &o->json, "one JSON object instead of tables");
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) return parsed;
  if (flags.help_requested()) {
    std::cout << flags.Help();
    *help = true;
    return absl::OkStatus();
  }
  if (o->workers < 1 || o->workers > 1000) return absl::InvalidArgumentError("--workers must be 1 to 1000");
  if (o->duration_seconds < 1 || o->duration_seconds > 3600) {
    return absl::InvalidArgumentError("--duration_seconds must be 1 to 3600");
  }
  if (o->clients < 0 || o->clients > 100) return absl::InvalidArgumentError("--clients must be 0 to 100");
  if (o->client_interval_ms < 1) return absl::InvalidArgumentError("--client_interval_ms must be ≥ 1");
  if (const char* token = std::getenv("SLIMFIT_TOKEN")) o->client_token = token;
  if (const char* token = std::getenv("SLIMFIT_WORKER_TOKEN")) o->join_token = token;
  if (o->client_token.empty() || o->join_token.empty()) {
    return absl::InvalidArgumentError(
        "$SLIMFIT_TOKEN (client) and $SLIMFIT_WORKER_TOKEN (join) are required");
  }
  return rpc::ValidateAddress(o->coordinator, "--coordinator", false);
}

// One client: GetJob, then ListWorkers, then a pause, until `stop`.
void RunClient(const Options& options, std::shared_ptr<LatencyRecorder> recorder,
               const absl::Notification& stop) {
  auto stub = v1::Coordinator::NewStub(MakeTimedChannel(options.coordinator, recorder));
  while (!stop.HasBeenNotified()) {
    v1::GetJobRequest get;
    get.set_job_id(options.job_id);
    v1::Job job;
    (void)stub->GetJob(rpc::MakeClientContext(options.client_token, std::chrono::seconds(10)).get(), get,
                       &job);
    v1::ListWorkersResponse workers;
    (void)stub->ListWorkers(rpc::MakeClientContext(options.client_token, std::chrono::seconds(10)).get(),
                            v1::ListWorkersRequest(), &workers);
    stop.WaitForNotificationWithTimeout(absl::Milliseconds(options.client_interval_ms));
  }
}

// The job now, on an untimed channel of its own.
absl::StatusOr<v1::Job> GetJob(const Options& options) {
  auto stub = v1::Coordinator::NewStub(rpc::MakeChannel(options.coordinator));
  v1::GetJobRequest request;
  request.set_job_id(options.job_id);
  v1::Job job;
  auto context = rpc::MakeClientContext(options.client_token, std::chrono::seconds(10));
  absl::Status status =
      rpc::FromGrpcStatus(stub->GetJob(context.get(), request, &job), "GetJob", context.get());
  if (!status.ok()) return status;
  return job;
}

struct Report {
  Options options;
  double registration_seconds = 0;  // from the first RegisterWorker to the last answer
  double run_seconds = 0;           // registration, load and deregistration
  int64_t rounds_during_load = 0;
  int64_t shard_calls = 0;
  int64_t shards_ok = 0;
  std::map<std::string, int64_t> shard_failures;
  int64_t workers_stopped = 0;
  ProcessUsage coordinator_before, coordinator_after, self_before, self_after;
  std::shared_ptr<LatencyRecorder> recorder;
};

bool TargetMet(const Report& report) {
  for (const std::string& rpc : kControlRpcs) {
    const LatencySummary summary = report.recorder->Summary(rpc);
    if (summary.count == 0 || summary.errors > 0 || summary.p99_ms >= report.options.target_p99_ms)
      return false;
  }
  return report.workers_stopped == 0;
}

// Control RPCs first, then anything else the run called (FetchParameters, DeregisterWorker).
std::vector<std::string> ReportedRpcs(const LatencyRecorder& recorder) {
  std::vector<std::string> rpcs = kControlRpcs;
  for (const std::string& method : recorder.Methods()) {
    if (std::find(rpcs.begin(), rpcs.end(), method) == rpcs.end()) rpcs.push_back(method);
  }
  return rpcs;
}

void PrintJson(const Report& r) {
  nlohmann::json rpcs = nlohmann::json::object();
  for (const std::string& rpc : ReportedRpcs(*r.recorder)) {
    const LatencySummary s = r.recorder->Summary(rpc);
    rpcs[rpc] = {{"count", s.count},   {"errors", s.errors}, {"errors_by_code", s.errors_by_code},
                 {"p50_ms", s.p50_ms}, {"p99_ms", s.p99_ms}, {"max_ms", s.max_ms}};
  }
  const double coordinator_cpu = r.coordinator_after.cpu_seconds - r.coordinator_before.cpu_seconds;
  nlohmann::json out = {{"workers", r.options.workers},
                        {"duration_seconds", r.options.duration_seconds},
                        {"clients", r.options.clients},
                        {"client_interval_ms", r.options.client_interval_ms},
                        {"registration_seconds", r.registration_seconds},
                        {"run_seconds", r.run_seconds},
                        {"rounds_during_load", r.rounds_during_load},
                        {"shard_calls", r.shard_calls},
                        {"shards_ok", r.shards_ok},
                        {"shard_failures", r.shard_failures},
                        {"workers_stopped_by_coordinator", r.workers_stopped},
                        {"rpcs", rpcs},
                        {"coordinator_cpu_seconds", coordinator_cpu},
                        {"coordinator_cores", coordinator_cpu / r.run_seconds},
                        {"coordinator_peak_rss_bytes", r.coordinator_after.peak_rss_bytes},
                        {"coordinator_rss_bytes", r.coordinator_after.rss_bytes},
                        {"coordinator_threads", r.coordinator_after.threads},
                        {"simulator_cpu_seconds", r.self_after.cpu_seconds - r.self_before.cpu_seconds},
                        {"simulator_peak_rss_bytes", r.self_after.peak_rss_bytes},
                        {"target_p99_ms", r.options.target_p99_ms},
                        {"target_met", TargetMet(r)}};
  std::cout << out.dump() << "\n";
}

void PrintText(const Report& r) {
  const Options& o = r.options;
  std::cout << absl::StrFormat(
      "%d simulated workers for %d s (registration %.2f s, whole run %.1f s); %d clients each calling GetJob "
      "and "
      "ListWorkers every %d ms\n",
      o.workers, o.duration_seconds, r.registration_seconds, r.run_seconds, o.clients, o.client_interval_ms);
  std::cout << absl::StrFormat(
      "job %s: %d rounds during the load; %d shard calls answered during it (%d OK)\n", o.job_id,
      r.rounds_during_load, r.shard_calls, r.shards_ok);
  for (const auto& [failure, calls] : r.shard_failures)
    std::cout << absl::StrFormat("  %5d  %s\n", calls, failure);
  std::cout << absl::StrFormat("%-17s %8s %7s %9s %9s %9s\n", "RPC", "calls", "errors", "p50 ms", "p99 ms",
                               "max ms");
  for (const std::string& rpc : ReportedRpcs(*r.recorder)) {
    const LatencySummary s = r.recorder->Summary(rpc);
    std::string errors = absl::StrCat(s.errors);
    std::cout << absl::StrFormat("%-17s %8d %7s %9.2f %9.2f %9.2f", rpc, s.count, errors, s.p50_ms, s.p99_ms,
                                 s.max_ms);
    for (const auto& [code, calls] : s.errors_by_code) std::cout << "  " << code << " " << calls;
    std::cout << "\n";
  }
  const double cpu = r.coordinator_after.cpu_seconds - r.coordinator_before.cpu_seconds;
  std::cout << absl::StrFormat(
      "coordinator: %.1f CPU s over %.1f s (%.2f cores), peak RSS %.1f MiB (VmHWM), RSS at the end %.1f MiB, "
      "%d "
      "threads\n",
      cpu, r.run_seconds, cpu / r.run_seconds, r.coordinator_after.peak_rss_bytes / 1048576.0,
      r.coordinator_after.rss_bytes / 1048576.0, r.coordinator_after.threads);
  std::cout << absl::StrFormat("simulator (this process): %.1f CPU s, peak RSS %.1f MiB\n",
                               r.self_after.cpu_seconds - r.self_before.cpu_seconds,
                               r.self_after.peak_rss_bytes / 1048576.0);
  if (r.workers_stopped > 0)
    std::cout << r.workers_stopped << " workers were told to stop (superseded or revoked)\n";
  std::cout << absl::StrFormat(
      "target: p99 of RegisterWorker, Heartbeat, GetJob and ListWorkers below %.0f ms, "
      "no errors: %s\n",
      o.target_p99_ms, TargetMet(r) ? "met" : "NOT met");
}

int Fail(const absl::Status& status) {
  std::cerr << base::FormatErrorLine(kProgram, status.message());
  return base::ExitCodeForStatus(status);
}

int Run(const std::vector<std::string>& args) {
  Report report;
  Options& options = report.options;
  bool help = false;
  if (absl::Status parsed = ParseOptions(args, &options, &help); !parsed.ok()) return Fail(parsed);
  if (help) return base::kExitOk;
  if (absl::Status threads = performer::ConfigureCpuThreads(1); !threads.ok()) return Fail(threads);
  base::RetainFreedHeapMemory();
  absl::StatusOr<planner::DeviceProfile> profile = planner::ReadDeviceProfile(options.profile_path);
  if (!profile.ok()) return Fail(profile.status());
  absl::StatusOr<ProcessUsage> coordinator_before =
      ReadProcessUsage(static_cast<int>(options.coordinator_pid));
  if (!coordinator_before.ok()) return Fail(coordinator_before.status());
  report.coordinator_before = *coordinator_before;
  report.self_before = ReadProcessUsage(0).value_or(ProcessUsage());
  report.recorder = std::make_shared<LatencyRecorder>();

  const absl::Time started = absl::Now();
  FleetOptions fleet_options;
  fleet_options.coordinator = options.coordinator;
  fleet_options.join_token = options.join_token;
  fleet_options.workers = static_cast<int>(options.workers);
  fleet_options.memory_budget_bytes = options.memory_budget_bytes;
  fleet_options.profile = *profile;
  fleet_options.state_root = options.state_dir;
  fleet_options.latencies = report.recorder;
  absl::StatusOr<std::unique_ptr<SimulatedFleet>> fleet = SimulatedFleet::Start(fleet_options);
  if (!fleet.ok()) return Fail(fleet.status());
  report.registration_seconds = absl::ToDoubleSeconds(absl::Now() - started);

  absl::StatusOr<v1::Job> job_before = GetJob(options);
  absl::Notification stop_clients;
  std::vector<std::thread> clients;
  for (int64_t i = 0; i < options.clients; ++i) {
    clients.emplace_back([&] { RunClient(options, report.recorder, stop_clients); });
  }
  absl::SleepFor(absl::Seconds(options.duration_seconds));
  stop_clients.Notify();
  for (std::thread& client : clients) client.join();
  absl::StatusOr<v1::Job> job_after = GetJob(options);
  if (job_before.ok() && job_after.ok()) {
    report.rounds_during_load =
        job_after->progress().rounds_completed() - job_before->progress().rounds_completed();
  }
  report.workers_stopped = (*fleet)->workers_stopped_by_coordinator();
  // Shards answered during the load: once the fleet drains, it refuses what the job still sends.
  report.shard_calls = (*fleet)->shard_calls();
  report.shards_ok = (*fleet)->shards_ok();
  report.shard_failures = (*fleet)->shard_failures();
  (*fleet)->Stop();
  report.run_seconds = absl::ToDoubleSeconds(absl::Now() - started);
  absl::StatusOr<ProcessUsage> coordinator_after =
      ReadProcessUsage(static_cast<int>(options.coordinator_pid));
  if (!coordinator_after.ok()) return Fail(coordinator_after.status());
  report.coordinator_after = *coordinator_after;
  report.self_after = ReadProcessUsage(0).value_or(ProcessUsage());
  if (options.json) {
    PrintJson(report);
  } else {
    PrintText(report);
  }
  return TargetMet(report) ? base::kExitOk : base::kExitFailure;
}

}  // namespace
}  // namespace slimfit::bench

int main(int argc, char** argv) {
  return slimfit::bench::Run(std::vector<std::string>(argv + 1, argv + argc));
}
