#include "worker/coordinator_link.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "rpc/rpc_util.h"

namespace slimfit::worker {
namespace {

std::chrono::milliseconds ToChrono(absl::Duration duration) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(duration)));
}

bool IsTransient(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

// The interval a coordinator asks for; a missing or absurd value keeps `current`.
absl::Duration IntervalOr(int64_t interval_ms, absl::Duration current) {
  return interval_ms > 0 ? absl::Milliseconds(std::max<int64_t>(interval_ms, 10)) : current;
}

}  // namespace

CoordinatorLink::CoordinatorLink(Options options) : options_(std::move(options)) {}

CoordinatorLink::~CoordinatorLink() { Stop(); }

std::string CoordinatorLink::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

uint64_t CoordinatorLink::incarnation() const {
  absl::MutexLock lock(&mu_);
  return incarnation_;
}

bool CoordinatorLink::Sleep(absl::Duration duration, bool wake_on_request) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || (wake_on_request && wake_); };
  mu_.AwaitWithTimeout(absl::Condition(&done), duration);
  if (stopping_) return false;
  if (wake_on_request) wake_ = false;
  return true;
}

absl::Status CoordinatorLink::Register() {
  absl::StatusOr<std::string> stored = options_.state->ReadWorkerId();
  if (!stored.ok()) return stored.status();
  // An id is ours only with its credential: without one the worker joins as a new worker.
  std::string id = options_.identity->has_credential() ? *stored : std::string();
  if (id.empty() && !options_.identity->has_join_token()) {
    return absl::FailedPreconditionError(
        "this worker holds no credential yet: give the join token (--token or $SLIMFIT_WORKER_TOKEN) once");
  }
  absl::Duration backoff = options_.initial_backoff;
  int failures = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("registration abandoned: the worker is shutting down");
    }
    v1::RegisterWorkerRequest request = options_.registration;
    request.set_worker_id(id);
    std::unique_ptr<grpc::ClientContext> context =
        rpc::MakeClientContext(options_.identity->BearerForCoordinator(), ToChrono(options_.rpc_timeout));
    v1::RegisterWorkerResponse response;
    const absl::Status status =
        rpc::FromGrpcStatus(options_.coordinator->RegisterWorker(context.get(), request, &response),
                            "RegisterWorker", context.get());
    if (status.ok()) {
      if (response.worker_id().empty()) {
        return absl::InternalError(absl::StrCat("the coordinator at ", options_.coordinator_address,
                                                " registered this worker without an id"));
      }
      // The coordinator counts this worker as live from now on and may call it at once (a job
      // submitted now asks it to describe its local datasets): accept its token before the
      // writes below, whose fsyncs took long enough on a busy disk for such a call to be refused
      // as from an unknown coordinator (local_data_e2e_test, once in a CI run).
      options_.identity->SetCoordinatorToken(response.coordinator_token());
      options_.service->SetWorkerId(response.worker_id());
      if (response.worker_id() != *stored) {
        if (absl::Status s = options_.state->WriteWorkerId(response.worker_id()); !s.ok()) return s;
      }
      if (!response.credential().empty()) {
        // Stored before it is used, so a crash now cannot leave a worker the coordinator knows
        // without the secret that proves it.
        if (absl::Status s = options_.state->WriteCredential(response.credential()); !s.ok()) return s;
        options_.identity->SetCredential(response.credential());
      }
      absl::Duration interval;
      {
        absl::MutexLock lock(&mu_);
        worker_id_ = response.worker_id();
        incarnation_ = response.incarnation();
        heartbeat_interval_ = IntervalOr(response.heartbeat_interval_ms(), heartbeat_interval_);
        interval = heartbeat_interval_;
      }
      base::SetLogComponent(absl::StrCat("worker ", response.worker_id()));
      base::LogInfo("registered with the coordinator at ", options_.coordinator_address, " as ",
                    response.worker_id(), " (incarnation ", response.incarnation(), ", heartbeat every ",
                    absl::FormatDuration(interval), ")");
      return absl::OkStatus();
    }
    // The coordinator does not know our identity (it lost its state, or never had it): join again.
    if ((absl::IsNotFound(status) || absl::IsUnauthenticated(status)) && !id.empty()) {
      if (!options_.identity->has_join_token()) {
        return absl::FailedPreconditionError(
            absl::StrCat("the coordinator at ", options_.coordinator_address, " no longer knows worker ", id,
                         " and no join token was given to join again (--token or $SLIMFIT_WORKER_TOKEN)"));
      }
      base::LogWarning("the coordinator does not know worker id ", id, " (", status.message(),
                       "): joining as a new worker");
      id.clear();
      options_.identity->ClearCredential();
      if (absl::Status s = options_.state->ClearCredential(); !s.ok()) return s;
      // A coordinator that lost this worker's id lost its jobs too and may reuse their ids and
      // parameter versions: nothing cached from before may be used again.
      if (options_.cache != nullptr) options_.cache->Clear();
      continue;
    }
    if (IsTransient(status)) {
      if (failures++ % 10 == 0) {
        base::LogWarning("coordinator at ", options_.coordinator_address, " unavailable (", status.message(),
                         ")", options_.unavailable_hint, "; retrying registration");
      }
      if (!Sleep(backoff, /*wake_on_request=*/false)) {
        return absl::CancelledError("registration abandoned: the worker is shutting down");
      }
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    return absl::Status(status.code(), absl::StrCat("registering with the coordinator at ",
                                                    options_.coordinator_address, ": ", status.message()));
  }
}

void CoordinatorLink::StartHeartbeats() {
  absl::MutexLock thread_lock(&thread_mu_);
  if (heartbeat_thread_.joinable()) return;
  {
    // After Stop() no thread starts: nothing would join it.
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
  }
  heartbeat_thread_ = base::Thread(
      "heartbeats", [this] { return HeartbeatLoop(); },
      [](const absl::Status& ended) {
        if (!ended.ok()) {
          base::LogError(ended.message(), "; no more heartbeats: the coordinator will mark this worker LOST");
        }
      });
}

void CoordinatorLink::HeartbeatNow() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

absl::Status CoordinatorLink::SendHeartbeat(int64_t* pending_peak) {
  WorkerService::HeartbeatState state = options_.service->TakeHeartbeatState();
  *pending_peak = std::max(*pending_peak, state.measured_peak_bytes);
  v1::HeartbeatRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_worker_id(worker_id_);
    request.set_incarnation(incarnation_);
  }
  request.set_state(state.state);
  if (state.current_work.has_value()) *request.mutable_current_work() = *state.current_work;
  request.set_measured_peak_bytes(*pending_peak);
  for (const auto& [job, version] : options_.cache->CachedVersions()) {
    (*request.mutable_cached_parameter_versions())[job] = version;
  }
  for (const std::string& job : options_.service->LocalStepsJobs()) request.add_local_steps_job_ids(job);

  std::unique_ptr<grpc::ClientContext> context =
      rpc::MakeClientContext(options_.identity->BearerForCoordinator(), ToChrono(options_.rpc_timeout));
  v1::HeartbeatResponse response;
  const absl::Status status = rpc::FromGrpcStatus(
      options_.coordinator->Heartbeat(context.get(), request, &response), "Heartbeat", context.get());
  if (!status.ok()) return status;
  *pending_peak = 0;  // delivered
  {
    absl::MutexLock lock(&mu_);
    heartbeat_interval_ = IntervalOr(response.heartbeat_interval_ms(), heartbeat_interval_);
  }
  for (const std::string& job : response.finished_job_ids()) {
    if (options_.cache->CachedVersions().count(job) > 0) {
      base::LogInfo("job ", job, " finished: dropping its cached parameters");
    }
    options_.cache->Drop(job);
    options_.service->ForgetJob(job);
  }
  return absl::OkStatus();
}

absl::Status CoordinatorLink::HeartbeatLoop() {
  int64_t pending_peak = 0;
  absl::Duration backoff = options_.initial_backoff;
  int failures = 0;
  while (true) {
    absl::Duration wait;
    {
      absl::MutexLock lock(&mu_);
      wait = failures > 0 ? std::min(backoff, heartbeat_interval_) : heartbeat_interval_;
    }
    if (!Sleep(wait, /*wake_on_request=*/true)) return absl::OkStatus();
    const absl::Status status = SendHeartbeat(&pending_peak);
    if (status.ok()) {
      if (failures > 0) base::LogInfo("the coordinator answers heartbeats again");
      failures = 0;
      backoff = options_.initial_backoff;
      continue;
    }
    if (absl::IsNotFound(status) || absl::IsUnauthenticated(status)) {
      base::LogWarning("the coordinator does not know this worker (", status.message(),
                       "): registering again");
      const absl::Status registered = Register();
      if (absl::IsCancelled(registered)) return absl::OkStatus();
      if (!registered.ok()) {
        base::LogError(registered.message());
        ++failures;
        backoff = std::min(backoff * 2, options_.max_backoff);
      } else {
        failures = 0;
        backoff = options_.initial_backoff;
      }
      continue;
    }
    if (absl::IsFailedPrecondition(status) || absl::IsPermissionDenied(status)) {
      base::LogError(absl::IsPermissionDenied(status) ? "this worker was refused ("
                                                      : "this worker's registration was superseded (",
                     status.message(), "): it must stop serving");
      if (options_.on_stop) options_.on_stop(status);
      return absl::OkStatus();  // on_stop has it
    }
    if (IsTransient(status)) {
      if (failures == 0) {
        base::LogWarning("heartbeat failed (", status.message(), "); retrying with back-off");
      }
      ++failures;
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    // A refusal that is not transient (a bad token, a malformed heartbeat) will not go away by
    // asking faster: back off as for transient failures, logging each distinct refusal.
    if (failures == 0 || backoff >= options_.max_backoff)
      base::LogError("heartbeat refused: ", status.message());
    ++failures;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

absl::Status CoordinatorLink::Deregister(const std::string& reason, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = options_.initial_backoff;
  v1::DeregisterWorkerRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_worker_id(worker_id_);
    request.set_incarnation(incarnation_);
  }
  request.set_reason(reason);
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    std::unique_ptr<grpc::ClientContext> context = rpc::MakeClientContext(
        options_.identity->BearerForCoordinator(), ToChrono(std::min(options_.rpc_timeout, left)));
    v1::DeregisterWorkerResponse response;
    const absl::Status status =
        rpc::FromGrpcStatus(options_.coordinator->DeregisterWorker(context.get(), request, &response),
                            "DeregisterWorker", context.get());
    if (status.ok()) {
      base::LogInfo("deregistered from the coordinator (", reason, ")");
      return status;
    }
    if (IsTransient(status) && absl::Now() + backoff < deadline) {
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    return absl::Status(status.code(), absl::StrCat("deregistering from the coordinator at ",
                                                    options_.coordinator_address, ": ", status.message()));
  }
}

void CoordinatorLink::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  absl::MutexLock thread_lock(&thread_mu_);
  if (heartbeat_thread_.joinable()) (void)heartbeat_thread_.Join();  // a failure was logged as it ended
}

}  // namespace slimfit::worker
