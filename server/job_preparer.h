// What a job spec turns into before a runner can start: the spec checked field by field
// (INVALID_ARGUMENT naming `spec.<field>`, also in ErrorDetail.field), the model (a fresh config,
// or an uploaded or earlier job's checkpoint, shape-checked), and the job's data (its datasets
// parsed, packed into sequences, the held-out part split off). Also the submission-time check that
// some live eligible worker can hold the model at all.
//
// Thread safety: thread-safe (reads the store and registry, which are). Pointers not owned; they
// must outlive the preparer.
#ifndef SLIMFIT_SERVER_JOB_PREPARER_H_
#define SLIMFIT_SERVER_JOB_PREPARER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "performer/model_config.h"
#include "proto/slimfit.pb.h"
#include "server/job_data.h"
#include "server/local_data_layouts.h"
#include "server/state_store.h"
#include "server/worker_registry.h"

namespace slimfit::server {

// The largest model (parameter bytes in the job's dtype) a coordinator trains unless told otherwise
// (--max_model_bytes). It keeps the parameters (also the published version, unless the job
// compresses parameter broadcasts: then one more copy), AdamW's two moments and the gradient sum
// in the parameters' dtype — about 4× this (one more while a fetch of the old version straddles a
// step) — plus the shard gradients being assembled (RunnerOptions::max_assembly_bytes, or one
// shard's when that is more; none when they are summed as they arrive, stream_into_sum_bytes)
// and a spot-checked shard's results, held whole until two agree (2×, 3× with a tiebreak).
inline constexpr int64_t kDefaultMaxModelBytes = int64_t{2} << 30;

struct PreparedJob {
  performer::ModelConfig config;
  // The initial parameters: the checkpoint's, or a fresh model's drawn from the seed (with the
  // spec's readout scale, 1 when absent); empty unless Prepare was asked to load them.
  std::vector<at::Tensor> initial;
  std::optional<JobData> data;
};

class JobPreparer {
 public:
  // Models whose parameters take more than `max_model_bytes` in the job's dtype are refused.
  // `safety_margin` and `max_sequences_per_shard` are the coordinator's (RunnerOptions): the
  // submission check searches plans as the job's worker planner will.
  JobPreparer(StateStore* store, WorkerRegistry* registry, double safety_margin,
              int64_t max_model_bytes = kDefaultMaxModelBytes, int64_t max_sequences_per_shard = 0)
      : store_(store),
        registry_(registry),
        safety_margin_(safety_margin),
        max_model_bytes_(max_model_bytes),
        max_sequences_per_shard_(max_sequences_per_shard),
        layouts_(store, registry) {}

  // `spec` with its local_datasets named by digest (LocalDataLayouts::Resolve): what SubmitJob
  // stores. INVALID_ARGUMENT naming the entry.
  absl::StatusOr<v1::JobSpec> ResolveLocalDatasets(const v1::JobSpec& spec) const;

  // Asks live holders for the layouts a spec needs at its sequence length and stores them, so that
  // Prepare finds them in the store. REQUIRES: `resolved` came from ResolveLocalDatasets. The errors
  // of LocalDataLayouts::Fetch.
  absl::Status FetchLayouts(const v1::JobSpec& resolved) const;

  // Validates `spec`, resolves the model (its parameters too when `load_initial`) and loads the
  // data. INVALID_ARGUMENT naming the field; NOT_FOUND for an unknown dataset or checkpoint
  // (ErrorDetail.resource_kind/id); RESOURCE_EXHAUSTED for a model above max_model_bytes
  // (ErrorDetail.required_bytes, limit_bytes), checked before any parameter is allocated;
  // FAILED_PRECONDITION for a checkpoint that does not load, data too small for one training
  // sequence, or a local dataset whose layout is neither stored nor describable by a live holder
  // (LocalDataLayouts::Source); DATA_LOSS for a stored file gone missing.
  absl::StatusOr<PreparedJob> Prepare(const v1::JobSpec& spec, bool load_initial) const;

  // OK when no eligible worker is live (the job waits, QUEUED) or when one of them has a plan —
  // searched as the job's worker planner searches it (server/worker_planner.h: the shard cap, and
  // a local-steps job's inner optimizer held beside the plan); otherwise RESOURCE_EXHAUSTED with what the
  // least plan needs and the largest usable budget (ErrorDetail.required_bytes, budget_bytes, usable_bytes).
  absl::Status CheckSomeWorkerFits(const v1::JobSpec& spec, const performer::ModelConfig& config,
                                   int64_t documents) const;

  // The model a spec names: a fresh config, or an uploaded or earlier job's checkpoint (its
  // parameters into *initial when not null). Errors as Prepare, for `spec.model`.
  absl::StatusOr<performer::ModelConfig> ResolveModel(const v1::ModelSpec& model,
                                                      std::vector<at::Tensor>* initial) const;

  // The parameters a job with `spec` (as stored: validated, defaults filled in) starts from, as
  // Prepare(spec, true) gives them: the named checkpoint's, or a fresh model's drawn from the seed.
  // Errors as ResolveModel.
  absl::StatusOr<std::vector<at::Tensor>> InitialParameters(const v1::JobSpec& spec) const;

 private:
  static absl::StatusOr<std::vector<at::Tensor>> FreshParameters(const v1::JobSpec& spec,
                                                                 const performer::ModelConfig& config);
  absl::StatusOr<JobData> LoadData(const v1::JobSpec& spec, const performer::ModelConfig& config) const;

  StateStore* const store_;
  WorkerRegistry* const registry_;
  const double safety_margin_;
  const int64_t max_model_bytes_;
  const int64_t max_sequences_per_shard_;
  const LocalDataLayouts layouts_;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_JOB_PREPARER_H_
