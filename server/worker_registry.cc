#include "server/worker_registry.h"

#include <algorithm>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/secrets.h"
#include "base/sha256.h"
#include "data_formats/dataset_format.h"
#include "google/protobuf/util/time_util.h"
#include "planner/device_profile_io.h"
#include "rpc/rpc_util.h"

namespace slimfit::server {
namespace {

google::protobuf::Timestamp ToTimestamp(absl::Time time) {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(time));
}

std::string NewWorkerId() {
  static std::mt19937_64 generator(std::random_device{}());
  return absl::StrFormat("w-%08x", static_cast<uint32_t>(generator()));
}

std::string DeviceKind(const std::string& device) { return device.substr(0, device.find(':')); }

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerRegistry>> WorkerRegistry::Create(StateStore* store,
                                                                       RegistryOptions options) {
  std::unique_ptr<WorkerRegistry> registry(new WorkerRegistry(store, options));
  absl::StatusOr<std::map<std::string, WorkerRecord>> known = store->Workers();
  if (!known.ok()) return known.status();
  absl::MutexLock lock(&registry->mutex_);
  registry->known_ = *std::move(known);
  for (const auto& [id, record] : registry->known_) {
    if (!record.credential_sha256.empty()) registry->by_credential_[record.credential_sha256] = id;
  }
  return registry;
}

std::optional<std::string> WorkerRegistry::WorkerOfCredential(absl::string_view bearer) const {
  const std::string digest = base::Sha256Hex(bearer);
  absl::MutexLock lock(&mutex_);
  auto it = by_credential_.find(digest);
  if (it == by_credential_.end()) return std::nullopt;
  return it->second;
}

absl::Status WorkerRegistry::CheckNotRevoked(const std::string& worker_id) const {
  absl::MutexLock lock(&mutex_);
  auto it = known_.find(worker_id);
  if (it == known_.end() || !it->second.revoked) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("worker ", worker_id, " was revoked at ",
                   absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", it->second.revoked_at, absl::UTCTimeZone()),
                   ": ", it->second.revoked_reason));
}

absl::StatusOr<v1::WorkerInfo> WorkerRegistry::Revoke(const std::string& worker_id,
                                                      const std::string& reason) {
  absl::MutexLock lock(&mutex_);
  auto known = known_.find(worker_id);
  if (known == known_.end()) {
    return rpc::NotFoundResourceError("worker", worker_id, absl::StrCat("no worker ", worker_id));
  }
  if (!known->second.revoked) {
    WorkerRecord record = known->second;
    record.revoked = true;
    record.revoked_reason = reason.empty() ? "revoked by an operator" : reason;
    record.revoked_at = options_.clock->Now();
    if (absl::Status stored = store_->PutWorker(worker_id, record); !stored.ok()) return stored;
    known->second = record;
    base::LogWarning("worker ", worker_id, " revoked: ", record.revoked_reason);
  }
  Entry& entry = workers_[worker_id];
  if (entry.info.worker_id().empty()) entry.info.set_worker_id(worker_id);
  entry.info.set_state(v1::WORKER_STATE_REVOKED);
  entry.info.clear_current_work();
  entry.info.set_revoked_reason(known->second.revoked_reason);
  *entry.info.mutable_revoked_at() = ToTimestamp(known->second.revoked_at);
  ++generation_;
  return entry.info;
}

bool WorkerRegistry::IsLiveState(v1::WorkerState state) {
  return state == v1::WORKER_STATE_IDLE || state == v1::WORKER_STATE_BUSY;
}

absl::StatusOr<v1::RegisterWorkerResponse> WorkerRegistry::Register(
    const v1::RegisterWorkerRequest& request, const std::optional<std::string>& credential_holder) {
  if (request.memory_budget_bytes() <= 0) {
    return rpc::InvalidFieldError("memory_budget_bytes",
                                  absl::StrCat("must be > 0, got ", request.memory_budget_bytes()));
  }
  if (request.device() != "cpu" &&
      !(request.device().rfind("cuda:", 0) == 0 && request.device().size() > 5)) {
    return rpc::InvalidFieldError("device", absl::StrCat("\"", request.device(), "\" is not cpu or cuda:N"));
  }
  if (absl::Status address = rpc::ValidateAddress(request.advertise_address(), "advertise_address", false);
      !address.ok()) {
    return address;
  }
  if (request.threads() < 1)
    return rpc::InvalidFieldError("threads", absl::StrCat("must be ≥ 1, got ", request.threads()));
  if (request.worker_id().size() > static_cast<size_t>(v1::LIMIT_MAX_NAME_BYTES)) {
    return rpc::InvalidFieldError("worker_id", "longer than 256 bytes");
  }
  if (absl::StatusOr<planner::DeviceProfile> profile =
          planner::CheckedDeviceProfileFromProto(request.profile());
      !profile.ok()) {
    return rpc::InvalidFieldError("profile", profile.status().message());
  }
  if (absl::Status datasets = rpc::ValidateLocalDatasets(request.local_datasets()); !datasets.ok())
    return datasets;

  std::string id;
  std::string credential;  // issued to a new worker only
  WorkerRecord record;
  std::shared_ptr<StateStore::PendingWorker> write;
  {
    absl::MutexLock lock(&mutex_);
    if (credential_holder.has_value()) {
      id = *credential_holder;
      if (!request.worker_id().empty() && request.worker_id() != id) {
        return absl::PermissionDeniedError(absl::StrCat("this credential belongs to worker ", id, ", not ",
                                                        request.worker_id(),
                                                        ": a worker acts only as itself"));
      }
      auto known = known_.find(id);
      if (known == known_.end()) {
        return absl::NotFoundError(
            absl::StrCat("worker ", id, " is unknown to this coordinator: join with a join token"));
      }
      if (known->second.revoked) {
        return absl::PermissionDeniedError(
            absl::StrCat("worker ", id, " was revoked: ", known->second.revoked_reason));
      }
      record = known->second;
      ++record.incarnation;
    } else {
      // A join token: always a new worker. (A join token cannot take over an existing id.)
      do {
        id = NewWorkerId();
      } while (known_.count(id) > 0);
      credential = base::RandomSecret("wc-");
      record.incarnation = 1;
      record.credential_sha256 = base::Sha256Hex(credential);
    }
    // Reserved now, so that concurrent registrations never share an id or an incarnation. Should
    // the write fail, the reservation is harmless: nobody learns the credential, and an
    // incarnation number is skipped.
    known_[id] = record;
    by_credential_[record.credential_sha256] = id;
    write = store_->QueueWorker(id, record);
  }
  // Durable before it is acknowledged. Outside the lock, so that heartbeats and listings do not
  // wait for the disk, and concurrent registrations share one commit.
  if (absl::Status stored = store_->AwaitWorker(write); !stored.ok()) return stored;
  const uint64_t incarnation = record.incarnation;
  absl::StatusOr<std::shared_ptr<v1::Worker::StubInterface>> stub =
      options_.stub_factory ? options_.stub_factory(request.advertise_address())
                            : std::shared_ptr<v1::Worker::StubInterface>(v1::Worker::NewStub(rpc::MakeChannel(
                                  request.advertise_address(), options_.worker_channel_credentials)));
  if (!stub.ok()) return stub.status();
  if (*stub == nullptr) {
    return absl::InternalError(absl::StrCat("no stub for worker ", id, " at ", request.advertise_address()));
  }
  const std::string call_token = base::RandomSecret("ct-");

  absl::MutexLock lock(&mutex_);
  if (const WorkerRecord& now = known_[id]; now.revoked) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", id, " was revoked while registering: ", now.revoked_reason));
  }
  Entry& entry = workers_[id];
  if (entry.info.incarnation() > incarnation) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", id, " incarnation ", incarnation,
                                                      " was superseded by incarnation ",
                                                      entry.info.incarnation(), " while registering"));
  }
  entry.info.Clear();
  entry.info.set_worker_id(id);
  entry.info.set_incarnation(incarnation);
  entry.info.set_state(v1::WORKER_STATE_IDLE);
  entry.info.set_device(request.device());
  entry.info.set_device_name(request.profile().device_name());
  entry.info.set_advertise_address(request.advertise_address());
  entry.info.set_memory_budget_bytes(request.memory_budget_bytes());
  entry.info.set_threads(request.threads());
  *entry.info.mutable_profile() = request.profile();
  entry.info.set_version(request.version());
  *entry.info.mutable_local_datasets() = request.local_datasets();
  const absl::Time now = options_.clock->Now();
  *entry.info.mutable_registered_at() = ToTimestamp(now);
  *entry.info.mutable_last_heartbeat_at() = ToTimestamp(now);
  entry.last_heartbeat = now;
  entry.stub = *std::move(stub);
  entry.call_token = call_token;
  ++generation_;
  base::LogInfo("worker ", id, " registered (incarnation ", incarnation, ", ", request.device(), ", budget ",
                request.memory_budget_bytes(), " B, at ", request.advertise_address(), ")");

  v1::RegisterWorkerResponse response;
  response.set_worker_id(id);
  response.set_incarnation(incarnation);
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response.set_lost_after_ms(absl::ToInt64Milliseconds(options_.lost_after));
  response.set_credential(credential);
  response.set_coordinator_token(entry.call_token);
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> WorkerRegistry::Heartbeat(const v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mutex_);
  auto it = workers_.find(request.worker_id());
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", request.worker_id(), " is not registered: register again"));
  }
  Entry& entry = it->second;
  if (request.incarnation() != entry.info.incarnation()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", request.worker_id(), " incarnation ", request.incarnation(),
                     " was superseded by incarnation ", entry.info.incarnation()));
  }
  if (entry.info.state() == v1::WORKER_STATE_LEFT) {
    return absl::NotFoundError(absl::StrCat("worker ", request.worker_id(), " deregistered: register again"));
  }
  if (entry.info.state() == v1::WORKER_STATE_REVOKED) {
    return absl::PermissionDeniedError(absl::StrCat("worker ", request.worker_id(), " was revoked"));
  }
  const v1::WorkerState before = entry.info.state();
  const v1::WorkerState state = request.state();
  if (state != v1::WORKER_STATE_IDLE && state != v1::WORKER_STATE_BUSY &&
      state != v1::WORKER_STATE_DRAINING) {
    return rpc::InvalidFieldError(
        "state", absl::StrCat("must be IDLE, BUSY or DRAINING, got ", v1::WorkerState_Name(state)));
  }
  entry.info.set_state(state);
  if (request.has_current_work())
    *entry.info.mutable_current_work() = request.current_work();
  else
    entry.info.clear_current_work();
  if (request.measured_peak_bytes() > 0) entry.info.set_measured_peak_bytes(request.measured_peak_bytes());
  entry.last_heartbeat = options_.clock->Now();
  *entry.info.mutable_last_heartbeat_at() = ToTimestamp(entry.last_heartbeat);
  if (IsLiveState(before) != IsLiveState(state)) {
    ++generation_;
    if (before == v1::WORKER_STATE_LOST) base::LogInfo("worker ", request.worker_id(), " is back");
  }
  v1::HeartbeatResponse response;
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response.set_lost_after_ms(absl::ToInt64Milliseconds(options_.lost_after));
  std::set<std::string> held;
  for (const auto& [job, version] : request.cached_parameter_versions()) held.insert(job);
  held.insert(request.local_steps_job_ids().begin(), request.local_steps_job_ids().end());
  for (const std::string& job : held) {
    if (finished_jobs_.count(job) > 0) response.add_finished_job_ids(job);
  }
  return response;
}

absl::Status WorkerRegistry::Deregister(const v1::DeregisterWorkerRequest& request) {
  absl::MutexLock lock(&mutex_);
  auto it = workers_.find(request.worker_id());
  if (it == workers_.end()) {
    if (known_.count(request.worker_id()) > 0) return absl::OkStatus();  // already gone
    return absl::NotFoundError(absl::StrCat("worker ", request.worker_id(), " is unknown"));
  }
  if (request.incarnation() != it->second.info.incarnation()) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", request.worker_id(), " incarnation ",
                                                      request.incarnation(), " was superseded"));
  }
  if (it->second.info.state() == v1::WORKER_STATE_REVOKED) return absl::OkStatus();
  if (it->second.info.state() != v1::WORKER_STATE_LEFT) {
    it->second.info.set_state(v1::WORKER_STATE_LEFT);
    it->second.info.clear_current_work();
    ++generation_;
    base::LogInfo("worker ", request.worker_id(), " left: ", request.reason());
  }
  return absl::OkStatus();
}

std::vector<std::string> WorkerRegistry::ExpireSilentWorkers() {
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mutex_);
  std::vector<std::string> lost;
  const absl::Duration unobserved =
      last_sweep_ == absl::InfinitePast() ? absl::ZeroDuration() : now - last_sweep_;
  last_sweep_ = now;
  const bool forgive = unobserved > options_.lost_after / 2;
  if (forgive) {
    base::LogWarning("no liveness sweep for ", absl::FormatDuration(unobserved),
                     " (the coordinator was stopped or starved): workers' silence during it is not counted");
  }
  for (auto& [id, entry] : workers_) {
    const v1::WorkerState state = entry.info.state();
    if (state == v1::WORKER_STATE_LOST || state == v1::WORKER_STATE_LEFT || state == v1::WORKER_STATE_REVOKED)
      continue;
    if (forgive) entry.last_heartbeat = std::min(now, entry.last_heartbeat + unobserved);
    if (now - entry.last_heartbeat > options_.lost_after) {
      entry.info.set_state(v1::WORKER_STATE_LOST);
      entry.info.clear_current_work();
      lost.push_back(id);
      base::LogWarning("worker ", id, " lost: no heartbeat for ",
                       absl::FormatDuration(now - entry.last_heartbeat));
    }
  }
  if (!lost.empty()) ++generation_;
  return lost;
}

std::vector<WorkerHandle> WorkerRegistry::LiveWorkers(const v1::DeviceConstraints& constraints) const {
  absl::MutexLock lock(&mutex_);
  std::vector<WorkerHandle> live;
  for (const auto& [id, entry] : workers_) {
    if (!IsLiveState(entry.info.state())) continue;
    if (entry.info.memory_budget_bytes() < constraints.min_memory_bytes()) continue;
    if (constraints.device_kinds_size() > 0 &&
        std::find(constraints.device_kinds().begin(), constraints.device_kinds().end(),
                  DeviceKind(entry.info.device())) == constraints.device_kinds().end()) {
      continue;
    }
    live.push_back(HandleOf(id, entry));
  }
  return live;
}

WorkerHandle WorkerRegistry::HandleOf(const std::string& id, const Entry& entry) const {
  WorkerHandle handle;
  handle.worker_id = id;
  handle.incarnation = entry.info.incarnation();
  handle.device = entry.info.device();
  handle.memory_budget_bytes = entry.info.memory_budget_bytes();
  handle.profile = planner::DeviceProfileFromProto(entry.info.profile());
  handle.stub = entry.stub;
  handle.call_token = entry.call_token;
  for (const v1::LocalDataset& dataset : entry.info.local_datasets())
    handle.local_datasets.insert(dataset.sha256());
  return handle;
}

int WorkerRegistry::LiveCount() const {
  absl::MutexLock lock(&mutex_);
  int count = 0;
  for (const auto& [id, entry] : workers_) count += IsLiveState(entry.info.state()) ? 1 : 0;
  return count;
}

bool WorkerRegistry::IsLive(const std::string& worker_id, uint64_t incarnation) const {
  absl::MutexLock lock(&mutex_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second.info.incarnation() == incarnation &&
         IsLiveState(it->second.info.state());
}

bool WorkerRegistry::IsServing(const std::string& worker_id, uint64_t incarnation) const {
  absl::MutexLock lock(&mutex_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second.info.incarnation() == incarnation &&
         (IsLiveState(it->second.info.state()) || it->second.info.state() == v1::WORKER_STATE_DRAINING);
}

std::optional<WorkerHandle> WorkerRegistry::Find(const std::string& worker_id) const {
  absl::MutexLock lock(&mutex_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return std::nullopt;
  return HandleOf(worker_id, it->second);
}

void WorkerRegistry::SetJobPlan(const std::string& worker_id, const v1::WorkerJobPlan& plan) {
  absl::MutexLock lock(&mutex_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  for (v1::WorkerJobPlan& existing : *it->second.info.mutable_plans()) {
    if (existing.job_id() == plan.job_id()) {
      // Measurements of the last shard stay until a newer shard reports its own.
      v1::WorkerJobPlan merged = plan;
      if (!merged.has_measured_tokens_per_second() && existing.has_measured_tokens_per_second()) {
        merged.set_measured_tokens_per_second(existing.measured_tokens_per_second());
      }
      if (!merged.has_measured_peak_bytes() && existing.has_measured_peak_bytes()) {
        merged.set_measured_peak_bytes(existing.measured_peak_bytes());
      }
      existing = std::move(merged);
      return;
    }
  }
  *it->second.info.add_plans() = plan;
}

void WorkerRegistry::ClearJob(const std::string& job_id) {
  absl::MutexLock lock(&mutex_);
  for (auto& [id, entry] : workers_) {
    auto* plans = entry.info.mutable_plans();
    plans->erase(std::remove_if(plans->begin(), plans->end(),
                                [&](const v1::WorkerJobPlan& p) { return p.job_id() == job_id; }),
                 plans->end());
    auto* quarantines = entry.info.mutable_quarantines();
    quarantines->erase(std::remove_if(quarantines->begin(), quarantines->end(),
                                      [&](const v1::Quarantine& q) { return q.job_id() == job_id; }),
                       quarantines->end());
  }
}

void WorkerRegistry::AddQuarantine(const std::string& worker_id, const std::string& job_id,
                                   const std::string& reason) {
  absl::MutexLock lock(&mutex_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  v1::Quarantine* quarantine = it->second.info.add_quarantines();
  quarantine->set_job_id(job_id);
  quarantine->set_reason(reason);
  *quarantine->mutable_since() = ToTimestamp(options_.clock->Now());
  ++generation_;
}

void WorkerRegistry::RecordShard(const std::string& worker_id, bool ok, int64_t measured_peak_bytes) {
  absl::MutexLock lock(&mutex_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  if (ok)
    it->second.info.set_shards_completed(it->second.info.shards_completed() + 1);
  else
    it->second.info.set_shards_failed(it->second.info.shards_failed() + 1);
  if (measured_peak_bytes > it->second.info.measured_peak_bytes()) {
    it->second.info.set_measured_peak_bytes(measured_peak_bytes);
  }
}

void WorkerRegistry::AddFinishedJob(const std::string& job_id) {
  absl::MutexLock lock(&mutex_);
  finished_jobs_.insert(job_id);
}

std::vector<v1::WorkerInfo> WorkerRegistry::List(bool include_gone) const {
  absl::MutexLock lock(&mutex_);
  std::vector<v1::WorkerInfo> list;
  for (const auto& [id, entry] : workers_) {
    const v1::WorkerState state = entry.info.state();
    if (!include_gone && (state == v1::WORKER_STATE_LOST || state == v1::WORKER_STATE_LEFT ||
                          state == v1::WORKER_STATE_REVOKED)) {
      continue;
    }
    list.push_back(entry.info);
  }
  if (include_gone) {
    // Revoked before this process started: known from the store only.
    for (const auto& [id, record] : known_) {
      if (!record.revoked || workers_.count(id) > 0) continue;
      v1::WorkerInfo info;
      info.set_worker_id(id);
      info.set_incarnation(record.incarnation);
      info.set_state(v1::WORKER_STATE_REVOKED);
      info.set_revoked_reason(record.revoked_reason);
      *info.mutable_revoked_at() = ToTimestamp(record.revoked_at);
      list.push_back(std::move(info));
    }
  }
  return list;
}

std::optional<v1::WorkerInfo> WorkerRegistry::Info(const std::string& worker_id) const {
  absl::MutexLock lock(&mutex_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return std::nullopt;
  return it->second.info;
}

uint64_t WorkerRegistry::generation() const {
  absl::MutexLock lock(&mutex_);
  return generation_;
}

}  // namespace slimfit::server
