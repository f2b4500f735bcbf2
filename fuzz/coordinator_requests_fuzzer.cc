// Fuzz target: the Coordinator service's requests as its handlers pass them to the coordinator
// (server/coordinator.h, and its registry for RegisterWorker, Heartbeat and DeregisterWorker):
// every request validator of the service, on a real coordinator with a state directory.
//
// Input: a binary slimfit.fuzz.CoordinatorCalls (fuzz_inputs.proto), at most 8 calls made in
// order. The coordinator starts from the seed uploads (service_uploads.h), with no job and no
// worker; after an input whose calls changed its state (a job submitted or cancelled, a worker
// registered, heartbeating or leaving) it is replaced by a fresh one, so every input meets the
// same coordinator and a finding replays.
// Invariants: each call answers OK or one of the codes its contract names (proto/slimfit.proto,
// docs/PROTOCOL.md) — never INTERNAL, UNKNOWN or a crash; a refusal of INVALID_ARGUMENT names a
// field; listings respect their page size.
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "fuzz/fuzz_inputs.pb.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/service_uploads.h"
#include "server/coordinator.h"

namespace slimfit::fuzz {
namespace {

using absl::StatusCode;

class Service {
 public:
  Service() { Start(); }

  server::Coordinator& coordinator() { return *coordinator_; }

  // A fresh coordinator in a fresh state directory.
  void Restart() {
    coordinator_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    Start();
  }

 private:
  void Start() {
    dir_ = ScratchPath(absl::StrCat("coordinator-", generation_++));
    server::CoordinatorOptions options;
    options.state_dir = dir_;
    options.upload_limit_bytes = int64_t{1} << 30;
    // A coordinator holds about 4× a job's model (parameters, AdamW's moments, the gradient sum)
    // and the shards being received: at the default limit (2 GiB of parameters) a valid job outgrows
    // libFuzzer's 3 GiB. What the fuzzer checks is the limit itself — larger models refused with
    // RESOURCE_EXHAUSTED before anything is allocated — so a small one serves.
    options.max_model_bytes = int64_t{16} << 20;
    absl::StatusOr<std::unique_ptr<server::Coordinator>> created = server::Coordinator::Create(options);
    SLIMFIT_FUZZ_CHECK(created.ok(), created.status().ToString());
    coordinator_ = *std::move(created);
    server::Coordinator* raw = coordinator_.get();
    PrintSeedUploads(UploadSeeds(
        [raw](const v1::UploadMetadata& metadata, std::optional<v1::DatasetInfo>* existing) {
          return raw->BeginUpload(metadata, existing);
        },
        dir_ + "/uploads"));
  }

  std::string dir_;
  int generation_ = 0;
  std::unique_ptr<server::Coordinator> coordinator_;
};

Service& TheService() {
  static Service* service = new Service();
  return *service;
}

void CheckCode(const absl::Status& status, const char* call, std::initializer_list<StatusCode> allowed) {
  if (status.ok()) return;
  bool found = false;
  for (StatusCode code : allowed) found |= status.code() == code;
  SLIMFIT_FUZZ_CHECK(found, call, " answered ", status.ToString());
  SLIMFIT_FUZZ_CHECK(
      !absl::IsInvalidArgument(status) || status.message().find(':') != absl::string_view::npos, call,
      " refusal names no field: ", status.ToString());
}

// Makes one call; true when it may have changed the coordinator's state.
bool Call(server::Coordinator& c, const CoordinatorCall& call) {
  constexpr auto kInvalid = StatusCode::kInvalidArgument;
  constexpr auto kNotFound = StatusCode::kNotFound;
  constexpr auto kPrecondition = StatusCode::kFailedPrecondition;
  constexpr auto kExhausted = StatusCode::kResourceExhausted;
  constexpr auto kRange = StatusCode::kOutOfRange;
  switch (call.call_case()) {
    case CoordinatorCall::kUploadMetadata: {
      std::optional<v1::DatasetInfo> existing;
      absl::StatusOr<std::unique_ptr<server::UploadSink>> sink =
          c.BeginUpload(call.upload_metadata(), &existing);
      CheckCode(sink.status(), "UploadDataset", {kInvalid, kExhausted});
      SLIMFIT_FUZZ_CHECK(!sink.ok() || (*sink == nullptr) == existing.has_value(),
                         "UploadDataset: sink and existing");
      return false;  // an unfinished sink removes its temporary file
    }
    case CoordinatorCall::kSubmitJob: {
      absl::StatusOr<v1::Job> job = c.SubmitJob(call.submit_job());
      CheckCode(job.status(), "SubmitJob", {kInvalid, kNotFound, kPrecondition, kExhausted});
      return job.ok();
    }
    case CoordinatorCall::kGetJob:
      CheckCode(c.GetJob(call.get_job().job_id()).status(), "GetJob", {kNotFound});
      return false;
    case CoordinatorCall::kListJobs: {
      absl::StatusOr<v1::ListJobsResponse> jobs = c.ListJobs(call.list_jobs());
      CheckCode(jobs.status(), "ListJobs", {kInvalid, kRange});
      const int page = call.list_jobs().page_size() == 0 ? 50 : call.list_jobs().page_size();
      SLIMFIT_FUZZ_CHECK(!jobs.ok() || jobs->jobs_size() <= page, "ListJobs: ", jobs->jobs_size(), " jobs");
      return false;
    }
    case CoordinatorCall::kWatchJob: {
      const absl::Status watched = c.WatchJob(
          call.watch_job(), [](const v1::JobEvent&) { return false; }, [] { return true; });
      CheckCode(watched, "WatchJob", {kInvalid, kNotFound});
      return false;
    }
    case CoordinatorCall::kCancelJob: {
      absl::StatusOr<v1::Job> job = c.CancelJob(call.cancel_job());
      CheckCode(job.status(), "CancelJob", {kInvalid, kNotFound, kPrecondition});
      return job.ok();
    }
    case CoordinatorCall::kListWorkers: {
      absl::StatusOr<v1::ListWorkersResponse> workers = c.ListWorkers(call.list_workers());
      CheckCode(workers.status(), "ListWorkers", {kInvalid, kRange});
      return false;
    }
    case CoordinatorCall::kGetMemoryPlan:
      CheckCode(c.GetMemoryPlan(call.get_memory_plan()).status(), "GetMemoryPlan",
                {kInvalid, kNotFound, kPrecondition, kRange});
      return false;
    case CoordinatorCall::kExportModel: {
      v1::ExportHeader header;
      CheckCode(c.ExportCheckpoint(call.export_model(), &header).status(), "ExportModel",
                {kInvalid, kNotFound, kPrecondition});
      return false;
    }
    case CoordinatorCall::kRegisterWorker: {
      // As the service calls it: a request naming an id comes from that worker's credential, one
      // without an id from a join token.
      const v1::RegisterWorkerRequest& request = call.register_worker();
      const std::optional<std::string> holder =
          request.worker_id().empty() ? std::nullopt : std::optional<std::string>(request.worker_id());
      absl::StatusOr<v1::RegisterWorkerResponse> registered = c.registry().Register(request, holder);
      CheckCode(registered.status(), "RegisterWorker", {kInvalid, kNotFound, StatusCode::kPermissionDenied});
      return registered.ok();
    }
    case CoordinatorCall::kHeartbeat: {
      absl::StatusOr<v1::HeartbeatResponse> beat = c.registry().Heartbeat(call.heartbeat());
      CheckCode(beat.status(), "Heartbeat", {kInvalid, kNotFound, kPrecondition});
      return beat.ok();
    }
    case CoordinatorCall::kDeregisterWorker: {
      const absl::Status left = c.registry().Deregister(call.deregister_worker());
      CheckCode(left, "DeregisterWorker", {kNotFound, kPrecondition});
      return left.ok();
    }
    case CoordinatorCall::kFetchParameters:
      CheckCode(c.Parameters(call.fetch_parameters()).status(), "FetchParameters",
                {kInvalid, kNotFound, kPrecondition, StatusCode::kAborted});
      return false;
    case CoordinatorCall::CALL_NOT_SET:
      return false;
  }
  return false;
}

}  // namespace
}  // namespace slimfit::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)slimfit::fuzz::TheService();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace slimfit;  // NOLINT
  fuzz::CoordinatorCalls calls;
  if (!calls.ParseFromArray(data, static_cast<int>(size))) return -1;
  fuzz::Service& service = fuzz::TheService();
  bool changed = false;
  for (int i = 0; i < calls.calls_size() && i < 8; ++i)
    changed |= fuzz::Call(service.coordinator(), calls.calls(i));
  if (changed) service.Restart();
  return 0;
}
