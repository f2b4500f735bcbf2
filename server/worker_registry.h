// The coordinator's view of its workers: identity (persistent ids, credentials, revocation),
// registration (incarnations), liveness from heartbeats, what each is doing, and a gRPC stub to
// reach it.
//
// Identity: a worker registering with a join token gets a new id and a credential (a random
// secret; only its SHA-256 is kept, in the StateStore). Later it registers with that credential
// and keeps its id; every registration also issues a coordinator token, which the coordinator
// presents when it calls that incarnation. A revoked worker's credential is refused for good.
//
// A worker is live while it heartbeats within lost_after; a sweep (ExpireSilentWorkers, called by
// the coordinator's liveness thread) marks silent ones LOST and a heartbeat revives them. Ids are
// kept in the StateStore, so a worker keeps its id across coordinator restarts: after a restart
// its next heartbeat gets NOT_FOUND-free service only once it registers again with that id
// (registrations of known ids are accepted; unknown ids get NOT_FOUND).
//
// Observers: job runners watch `generation()` (bumped on every membership or state change) to
// notice lost workers while a round is in flight.
//
// Thread safety: thread-safe.
#ifndef SLIMFIT_SERVER_WORKER_REGISTRY_H_
#define SLIMFIT_SERVER_WORKER_REGISTRY_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "planner/device_profile.h"
#include "proto/slimfit.grpc.pb.h"
#include "proto/slimfit.pb.h"
#include "server/state_store.h"

namespace slimfit::server {

// Makes the stub through which the coordinator calls a worker at `address` (its advertised
// address, as it registered). INVALID_ARGUMENT (or another error) refuses the registration.
using WorkerStubFactory =
    std::function<absl::StatusOr<std::shared_ptr<v1::Worker::StubInterface>>(const std::string& address)>;

struct RegistryOptions {
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration lost_after = absl::Seconds(5);
  // Credentials of the channels to the workers' Worker services; null: plaintext. Used by the
  // default stub factory only.
  std::shared_ptr<grpc::ChannelCredentials> worker_channel_credentials;
  // How stubs to workers are made; empty: a gRPC channel to the address with
  // worker_channel_credentials (tests put in-process workers behind it).
  WorkerStubFactory stub_factory;
  // Heartbeat times, liveness sweeps, quarantine timestamps. Not owned; must outlive the registry.
  base::Clock* clock = &base::RealClock();
};

// What a job runner needs of one worker.
struct WorkerHandle {
  std::string worker_id;
  uint64_t incarnation = 0;
  std::string device;
  int64_t memory_budget_bytes = 0;
  planner::DeviceProfile profile;
  std::shared_ptr<v1::Worker::StubInterface> stub;
  std::string call_token;  // the coordinator token of this incarnation: the bearer of calls to it
  std::set<std::string> local_datasets;  // SHA-256 of each dataset it holds (LocalDataset.sha256)
};

class WorkerRegistry {
 public:
  // Loads known ids from `store` (not owned; must outlive the registry).
  static absl::StatusOr<std::unique_ptr<WorkerRegistry>> Create(StateStore* store, RegistryOptions options);

  // `credential_holder` is the worker whose credential authenticated the call, or nullopt for a
  // join token: a new worker, whatever request.worker_id says (a join token cannot claim an id).
  // PERMISSION_DENIED when the holder was revoked or request.worker_id is another's;
  // INVALID_ARGUMENT for a malformed request.
  absl::StatusOr<v1::RegisterWorkerResponse> Register(const v1::RegisterWorkerRequest& request,
                                                      const std::optional<std::string>& credential_holder);
  // The worker whose credential is `bearer` (revoked ones too), or nullopt.
  std::optional<std::string> WorkerOfCredential(absl::string_view bearer) const;
  // PERMISSION_DENIED "worker … was revoked …" for a revoked worker; OK otherwise.
  absl::Status CheckNotRevoked(const std::string& worker_id) const;
  // Revokes `worker_id` for good (durable; idempotent): its state becomes REVOKED, so calls in
  // flight to it are cancelled by their runners. NOT_FOUND for an unknown id; the store's errors.
  absl::StatusOr<v1::WorkerInfo> Revoke(const std::string& worker_id, const std::string& reason);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  absl::Status Deregister(const v1::DeregisterWorkerRequest& request);

  // Marks workers silent for longer than lost_after as LOST; returns their ids. The sweep's time is
  // options.clock's Now() (it must not go backwards). Silence counts only while the
  // coordinator was sweeping: when more than lost_after / 2 passed since the previous sweep (the
  // process was stopped, suspended or starved, and heartbeats queued up unread), the time since
  // that sweep is not held against any worker — otherwise every worker would be LOST the moment
  // the coordinator resumed, and every shard in flight reassigned. A worker still silent then is
  // LOST lost_after (less its silence before the gap) after the sweeps resume.
  std::vector<std::string> ExpireSilentWorkers();

  // Live (IDLE, BUSY) workers that satisfy `constraints`, by id.
  std::vector<WorkerHandle> LiveWorkers(const v1::DeviceConstraints& constraints) const;
  // Live workers of any kind.
  int LiveCount() const;
  // True while `worker_id` with this incarnation is live.
  bool IsLive(const std::string& worker_id, uint64_t incarnation) const;
  // True while `worker_id` with this incarnation may still finish work it has: live or DRAINING.
  bool IsServing(const std::string& worker_id, uint64_t incarnation) const;
  std::optional<WorkerHandle> Find(const std::string& worker_id) const;

  // Records what a worker computes / its plan for a job, for ListWorkers.
  void SetJobPlan(const std::string& worker_id, const v1::WorkerJobPlan& plan);
  // Forgets a finished job's plans and quarantines.
  void ClearJob(const std::string& job_id);
  // Shown by ListWorkers: the worker gets no more shards of `job_id` (the job runner decides).
  void AddQuarantine(const std::string& worker_id, const std::string& job_id, const std::string& reason);
  void RecordShard(const std::string& worker_id, bool ok, int64_t measured_peak_bytes);

  // Jobs that finished (this run, or before a restart), named to the workers that say they hold
  // something of them (cached parameters, local-steps state) so that they drop it.
  void AddFinishedJob(const std::string& job_id);

  std::vector<v1::WorkerInfo> List(bool include_gone) const;
  std::optional<v1::WorkerInfo> Info(const std::string& worker_id) const;

  // Bumped on every change of membership or liveness.
  uint64_t generation() const;

  const RegistryOptions& options() const { return options_; }

 private:
  struct Entry {
    v1::WorkerInfo info;
    absl::Time last_heartbeat;
    std::shared_ptr<v1::Worker::StubInterface> stub;
    std::string call_token;
  };
  WorkerHandle HandleOf(const std::string& id, const Entry& entry) const;
  WorkerRegistry(StateStore* store, RegistryOptions options) : store_(store), options_(options) {}
  static bool IsLiveState(v1::WorkerState state);

  StateStore* store_;
  RegistryOptions options_;
  mutable absl::Mutex mutex_;
  std::map<std::string, WorkerRecord> known_ ABSL_GUARDED_BY(mutex_);         // by id (durable)
  std::map<std::string, std::string> by_credential_ ABSL_GUARDED_BY(mutex_);  // credential SHA-256 → id
  std::map<std::string, Entry> workers_ ABSL_GUARDED_BY(mutex_);
  std::set<std::string> finished_jobs_ ABSL_GUARDED_BY(mutex_);
  uint64_t generation_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Time last_sweep_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();  // of ExpireSilentWorkers
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_WORKER_REGISTRY_H_
