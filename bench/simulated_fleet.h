// A fleet of workers in one process, for loading a coordinator with many of them on one machine.
// Each simulated worker is made of the real worker's components — its own WorkerIdentity, state
// directory, ParameterCache, WorkerService (real gradients from the real engine, which the
// coordinator validates and spot-checks) on a gRPC server of its own on loopback, and a
// CoordinatorLink that registers it with the join token, then its credential, and heartbeats at
// the interval the coordinator asks — so the coordinator sees N workers speaking the protocol
// over N connections. What differs from N `slimfit-worker` processes, and why:
//   - one LibTorch in memory instead of N (a real worker's resident set is ~100+ MiB);
//   - one shard computes at a time across the fleet: the machine's cores belong to the
//     coordinator being measured, not to the fleet's arithmetic (real workers are other machines);
//     a worker waiting for its turn is simply slow to answer;
//   - a worker forgets its parameters after each shard: LibTorch's memory tracker is process-wide,
//     and N cached models would count against every worker's measured peak (the coordinator
//     would replan them against shrunken budgets). It costs at most one extra FetchParameters per
//     worker and round (a worker gets a new version every round anyway);
//   - log lines name the last worker that registered: the log's component is process-wide.
//
// Example:
//   FleetOptions options;
//   options.coordinator = "127.0.0.1:50051";  options.join_token = "...";  options.workers = 64;
//   options.profile = profile;  options.state_root = "/tmp/fleet";  options.latencies = recorder;
//   absl::StatusOr<std::unique_ptr<SimulatedFleet>> fleet = SimulatedFleet::Start(options);
//   ...                                       // the fleet heartbeats and computes shards
//   (*fleet)->Stop();                         // deregisters every worker
//
// Thread safety: Start and Stop from one thread; the accessors from any.
#ifndef SLIMFIT_BENCH_SIMULATED_FLEET_H_
#define SLIMFIT_BENCH_SIMULATED_FLEET_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/rpc_latency.h"
#include "planner/device_profile.h"

namespace slimfit::bench {

struct FleetOptions {
  std::string coordinator;                          // host:port; required
  std::string join_token;                           // the coordinator's --worker_token; required
  int workers = 64;                                 // ≥ 1
  int64_t memory_budget_bytes = int64_t{64} << 20;  // each worker's --memory_budget
  planner::DeviceProfile profile;                   // each worker's calibrated profile
  // Worker i keeps its id and credential in <state_root>/worker-<i>; required.
  std::string state_root;
  // Every call a worker makes to the coordinator is timed here; required.
  std::shared_ptr<LatencyRecorder> latencies;
  // Registration gives up after this (the coordinator unreachable or refusing).
  absl::Duration register_timeout = absl::Seconds(60);
};

class SimulatedFleet {
 public:
  // Starts every worker's server, then registers all of them at once, each from its own thread
  // (a fleet coming up together); each starts heartbeating as soon as it is registered. INVALID_ARGUMENT for
  // bad options; DEADLINE_EXCEEDED "k of N workers registered within …" when registration runs out of time;
  // a registration's own error (UNAUTHENTICATED for a wrong join token, …); UNAVAILABLE when a
  // server cannot listen.
  static absl::StatusOr<std::unique_ptr<SimulatedFleet>> Start(FleetOptions options);
  ~SimulatedFleet();  // Stop()
  SimulatedFleet(const SimulatedFleet&) = delete;
  SimulatedFleet& operator=(const SimulatedFleet&) = delete;

  // Drains every worker, deregisters it (as on SIGTERM; up to 5 s each, all at once) and stops
  // the servers. Idempotent.
  void Stop();

  int size() const { return static_cast<int>(workers_.size()); }
  // ComputeGradient calls the fleet answered (any status), and those that ended OK.
  int64_t shard_calls() const { return counters_->calls.load(); }
  int64_t shards_ok() const { return counters_->ok.load(); }
  // The calls that did not end OK, by status code and message ("ABORTED: …"), with counts.
  std::map<std::string, int64_t> shard_failures() const;
  // Workers told they were superseded or revoked (each stops heartbeating); 0 in a healthy run.
  int64_t workers_stopped_by_coordinator() const { return counters_->stopped.load(); }

  struct Worker;  // one simulated worker's components (simulated_fleet.cc)
  struct Counters {
    std::atomic<int64_t> calls{0};
    std::atomic<int64_t> ok{0};
    std::atomic<int64_t> stopped{0};
    absl::Mutex mutex;
    std::map<std::string, int64_t> failures ABSL_GUARDED_BY(mutex);
  };

 private:
  SimulatedFleet() = default;

  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
  std::vector<std::unique_ptr<Worker>> workers_;
  bool stopped_ = false;
};

}  // namespace slimfit::bench

#endif  // SLIMFIT_BENCH_SIMULATED_FLEET_H_
