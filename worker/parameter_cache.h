// ParameterCache: the parameters a worker differentiates at, fetched from the coordinator once per
// (job, parameter version) and kept as a ready PerformerModel on the worker's device
// (docs/PROTOCOL.md, "One round", step 4).
//
// A fetch is one Coordinator.FetchParameters stream: a ParameterManifest first — checked against
// the request (job and version echoed) and against itself (its config valid, its tensor list
// exactly the parameter names and shapes of that config in model order, in the manifest's dtype,
// total_bytes their sum) — then every tensor's chunks, checked and rebuilt by a
// performer::TensorAssembler. Only the latest version of each job is kept: a newer version replaces
// the older one, Drop(job) forgets a finished job. A model handed out stays valid while the caller
// holds it, even if the cache drops it meanwhile.
//
// Deltas: a fetch names the version of the job the cache holds (FetchParametersRequest
// .base_version); where the job compresses parameter broadcasts the coordinator answers with the
// encoded difference to it, and the new version is rebuilt as base + decoded difference
// (performer::AddDifference: the coordinator's own definition of the version, bit for bit).
//
// Example:
//   ParameterCache::Options options;
//   options.coordinator = stub;          // shared with the registration link
//   options.identity = &identity;
//   ParameterCache cache(options);
//   absl::StatusOr<std::shared_ptr<const performer::PerformerModel>> model =
//       cache.Get("job-000001", 7, performer::DType::kFloat32);
//
// Errors of Get (every message names the job and version):
//   ABORTED             the version is stale (the coordinator's ABORTED, its ErrorDetail with the
//                       current version kept), or the job is terminal (FAILED_PRECONDITION there);
//   NOT_FOUND           the coordinator does not know the job or the version (ErrorDetail kept);
//   UNAVAILABLE         the coordinator could not be reached or the fetch timed out;
//   FAILED_PRECONDITION the coordinator refused this worker's token;
//   INTERNAL            a malformed stream (manifest, chunk or model), or any other failure.
//
// Thread safety: safe for concurrent use. Concurrent Gets of one (job, version) run one fetch; the
// others wait for it and share its result, error included. Failed fetches are not cached.
#ifndef SLIMFIT_WORKER_PARAMETER_CACHE_H_
#define SLIMFIT_WORKER_PARAMETER_CACHE_H_

#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "performer/performer_model.h"
#include "performer/plan.h"
#include "proto/slimfit.grpc.pb.h"
#include "worker/worker_identity.h"

namespace slimfit::worker {

class ParameterCache {
 public:
  struct Options {
    // The coordinator's stub; required. Shared: the registration link uses the same channel.
    std::shared_ptr<v1::Coordinator::StubInterface> coordinator;
    // The worker's bearer (its credential), presented as `authorization: Bearer <token>`. Not owned;
    // must outlive the cache. Required.
    const WorkerIdentity* identity = nullptr;
    // Where models are built.
    c10::Device device = c10::Device(c10::kCPU);
    // Deadline of one FetchParameters stream.
    absl::Duration fetch_timeout = absl::Minutes(2);
  };

  explicit ParameterCache(Options options);
  ParameterCache(const ParameterCache&) = delete;
  ParameterCache& operator=(const ParameterCache&) = delete;

  // The model of `job_id` at `version`, in `dtype`, on the device: from the cache, or fetched
  // (blocking, up to fetch_timeout and no later than `deadline`, e.g. the deadline of the shard
  // that needs it). A dtype other than the manifest's is converted from the fetched model once
  // and kept beside it. Errors: see the file comment.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const performer::PerformerModel>> Get(
      const std::string& job_id, uint64_t version, performer::DType dtype,
      absl::Time deadline = absl::InfiniteFuture());

  // Forgets every version of `job_id` (a finished job). Idempotent; a fetch in flight completes
  // for its callers but is not kept.
  void Drop(const std::string& job_id);

  // Tensor bytes of the cached models of jobs other than `job_id` (every dtype copy).
  int64_t BytesOfOtherJobs(const std::string& job_id) const;
  // Tensor bytes of every cached model (the worker's metrics).
  int64_t Bytes() const;
  // Drops the finished entries of every job but `job_id` (a shard needs their memory).
  void DropOtherJobs(const std::string& job_id);

  // Forgets every cached version: the coordinator that published them is gone (it did not know
  // this worker's id any more), and a new one may reuse job ids and versions.
  void Clear();

  // The version held per job (as Heartbeat.cached_parameter_versions).
  std::map<std::string, uint64_t> CachedVersions() const;

 private:
  struct Entry {
    bool done = false;                                    // the fetch finished (see status)
    absl::Status status;                                  // of the fetch, once done
    performer::DType dtype = performer::DType::kFloat32;  // the manifest's
    std::map<performer::DType, std::shared_ptr<const performer::PerformerModel>> models;
  };
  using Key = std::pair<std::string, uint64_t>;

  // One FetchParameters stream, checked and built into a model in the manifest's dtype. `base`
  // (may be null): the job's cached model at `base_version`, which the answer may be relative to.
  absl::StatusOr<std::shared_ptr<const performer::PerformerModel>> Fetch(
      const std::string& job_id, uint64_t version, absl::Time deadline, uint64_t base_version,
      std::shared_ptr<const performer::PerformerModel> base) const;
  // Erases every finished entry of `job_id` older than the newest finished one.
  void KeepLatest(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Options options_;

  mutable absl::Mutex mu_;
  absl::CondVar fetched_;  // signalled when any fetch finishes
  // Entries being fetched and ready ones; failed fetches are removed.
  std::map<Key, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_PARAMETER_CACHE_H_
