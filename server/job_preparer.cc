#include "server/job_preparer.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data_formats/dataset_format.h"
#include "data_formats/token_codec.h"
#include "performer/model_checkpoint.h"
#include "performer/parameter_selection.h"
#include "performer/performer_model.h"
#include "performer/trainer.h"
#include "planner/plan_proto.h"
#include "planner/plan_request_builder.h"
#include "planner/plan_search.h"
#include "rpc/rpc_util.h"
#include "server/job_bounds.h"
#include "server/upload_store.h"
#include "server/worker_planner.h"
#include "wire/engine_settings.h"
#include "wire/tensor_codec.h"

namespace slimfit::server {
namespace {

// An INVALID_ARGUMENT whose message starts with the field at fault ("spec.optimizer.learning_rate:
// ..."), with that field in its ErrorDetail as well.
absl::Status WithFieldDetail(const absl::Status& invalid) {
  v1::ErrorDetail detail;
  detail.set_field(std::string(invalid.message().substr(0, invalid.message().find(':'))));
  return rpc::AttachErrorDetail(invalid, detail);
}

}  // namespace

absl::StatusOr<performer::ModelConfig> JobPreparer::ResolveModel(const v1::ModelSpec& model,
                                                                 std::vector<at::Tensor>* initial) const {
  switch (model.source_case()) {
    case v1::ModelSpec::kConfig:
      return planner::ModelConfigFromProto(model.config(), "spec.model.config");
    case v1::ModelSpec::kCheckpoint: {
      const v1::CheckpointRef& ref = model.checkpoint();
      std::optional<performer::ModelConfig> expected;
      if (ref.has_config()) {
        absl::StatusOr<performer::ModelConfig> config =
            planner::ModelConfigFromProto(ref.config(), "spec.model.checkpoint.config");
        if (!config.ok()) return config.status();
        expected = *config;
      }
      std::string path;
      if (ref.source_case() == v1::CheckpointRef::kUploadId) {
        if (ref.has_round()) return rpc::InvalidFieldError("spec.model.checkpoint.round", "only with job_id");
        absl::StatusOr<std::optional<DatasetRecord>> record = store_->GetDataset(ref.upload_id());
        if (!record.ok()) return record.status();
        if (!record->has_value() || !IsCheckpointType((*record)->info.content_type())) {
          return rpc::NotFoundResourceError("checkpoint", ref.upload_id(),
                                            absl::StrCat("no uploaded checkpoint ", ref.upload_id()));
        }
        path = (*record)->path;
        if ((*record)->info.content_type() == "application/x-pytorch" && !expected.has_value()) {
          return rpc::InvalidFieldError("spec.model.checkpoint.config",
                                        "required for a torch.save checkpoint");
        }
      } else if (ref.source_case() == v1::CheckpointRef::kJobId) {
        absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_->Checkpoints(ref.job_id());
        if (!checkpoints.ok()) return checkpoints.status();
        const CheckpointRecord* chosen = nullptr;
        for (const CheckpointRecord& c : *checkpoints) {
          if (!ref.has_round() || c.round == ref.round()) chosen = &c;
        }
        if (chosen == nullptr) {
          return rpc::NotFoundResourceError(
              "checkpoint", ref.job_id(),
              absl::StrCat("job ", ref.job_id(), " has no checkpoint",
                           ref.has_round() ? absl::StrCat(" of round ", ref.round()) : ""));
        }
        path = chosen->model_path;
      } else {
        return rpc::InvalidFieldError("spec.model.checkpoint", "set upload_id or job_id");
      }
      absl::StatusOr<performer::PerformerModel> loaded =
          performer::LoadModel(path, performer::DType::kFloat32, at::kCPU, expected);
      if (!loaded.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("spec.model.checkpoint: ", loaded.status().message()));
      }
      if (initial != nullptr) *initial = loaded->parameters();
      return loaded->config();
    }
    default:
      return rpc::InvalidFieldError("spec.model", "set config (a fresh model) or checkpoint");
  }
}

absl::StatusOr<v1::JobSpec> JobPreparer::ResolveLocalDatasets(const v1::JobSpec& spec) const {
  absl::StatusOr<std::vector<std::string>> digests = layouts_.Resolve(spec.local_datasets());
  if (!digests.ok()) return digests.status();
  v1::JobSpec resolved = spec;
  resolved.clear_local_datasets();
  for (const std::string& digest : *digests) resolved.add_local_datasets(digest);
  return resolved;
}

absl::Status JobPreparer::FetchLayouts(const v1::JobSpec& resolved) const {
  if (resolved.sequence_length() < 2) return absl::OkStatus();  // Prepare reports it, naming the field
  for (int i = 0; i < resolved.local_datasets_size(); ++i) {
    if (absl::Status fetched = layouts_.Fetch(resolved.local_datasets(i), resolved.sequence_length(), i);
        !fetched.ok()) {
      return fetched;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<JobData> JobPreparer::LoadData(const v1::JobSpec& spec,
                                              const performer::ModelConfig& config) const {
  if (spec.dataset_ids_size() == 0 && spec.local_datasets_size() == 0) {
    return rpc::InvalidFieldError(
        "spec.dataset_ids", "at least one dataset is required (dataset_ids, or local_datasets on workers)");
  }
  rpc::TokenStream stream;
  for (const std::string& id : spec.dataset_ids()) {
    absl::StatusOr<std::optional<DatasetRecord>> record = store_->GetDataset(id);
    if (!record.ok()) return record.status();
    if (!record->has_value() || !IsDatasetType((*record)->info.content_type())) {
      return rpc::NotFoundResourceError("dataset", id, absl::StrCat("no dataset ", id));
    }
    std::ifstream in((*record)->path, std::ios::binary);
    if (!in)
      return absl::DataLossError(
          absl::StrCat("dataset ", id, ": stored file ", (*record)->path, " is missing"));
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<rpc::TokenStream> parsed = rpc::ParseDataset(
        bytes, (*record)->info.content_type(), (*record)->token_encoding, (*record)->document_separator);
    if (!parsed.ok()) return parsed.status();
    rpc::AppendStream(&stream, *parsed);
  }
  const int width = rpc::TokenWidth(rpc::NarrowestTokenEncoding(config.vocab));
  if (spec.sequence_length() > v1::LIMIT_MAX_CHUNK_BYTES / width) {
    return rpc::InvalidFieldError(
        "spec.sequence_length",
        absl::StrCat(spec.sequence_length(), " tokens of ", width, " bytes do not fit one shard of ",
                     v1::LIMIT_MAX_CHUNK_BYTES, " bytes"));
  }
  std::vector<LocalSource> local;
  for (int i = 0; i < spec.local_datasets_size(); ++i) {
    absl::StatusOr<LocalSource> source =
        layouts_.Source(spec.local_datasets(i), spec.sequence_length(), config.vocab, i);
    if (!source.ok()) return source.status();
    local.push_back(*std::move(source));
  }
  return JobData::Create(std::move(stream), std::move(local), config.vocab, spec.sequence_length(),
                         spec.tokens_per_round(), spec.held_out_fraction(), spec.seed());
}

absl::StatusOr<PreparedJob> JobPreparer::Prepare(const v1::JobSpec& spec, bool load_initial) const {
  if (spec.name().size() > static_cast<size_t>(v1::LIMIT_MAX_NAME_BYTES))
    return rpc::InvalidFieldError("spec.name", "longer than 256 bytes");
  PreparedJob prepared;
  absl::StatusOr<performer::ModelConfig> config =
      ResolveModel(spec.model(), load_initial ? &prepared.initial : nullptr);
  if (!config.ok()) return config.status();
  prepared.config = *config;
  if (spec.sequence_length() < 2)
    return rpc::InvalidFieldError("spec.sequence_length",
                                  absl::StrCat("must be ≥ 2, got ", spec.sequence_length()));
  if (spec.tokens_per_round() < spec.sequence_length()) {
    return rpc::InvalidFieldError(
        "spec.tokens_per_round",
        absl::StrCat(spec.tokens_per_round(), " is less than sequence_length ", spec.sequence_length()));
  }
  if (spec.rounds() < 1)
    return rpc::InvalidFieldError("spec.rounds", absl::StrCat("must be ≥ 1, got ", spec.rounds()));
  if (absl::Status optimizer = wire::ValidateOptimizer(spec.optimizer()); !optimizer.ok()) {
    return WithFieldDetail(optimizer);
  }
  if (spec.eval_interval_rounds() < 0)
    return rpc::InvalidFieldError("spec.eval_interval_rounds", "must be ≥ 0");
  if (spec.has_checkpoint_interval_rounds() && spec.checkpoint_interval_rounds() < 1) {
    return rpc::InvalidFieldError("spec.checkpoint_interval_rounds", "must be ≥ 1");
  }
  if (spec.has_min_workers() && spec.min_workers() < 1)
    return rpc::InvalidFieldError("spec.min_workers", "must be ≥ 1");
  if (spec.has_verify_fraction() && !(spec.verify_fraction() >= 0 && spec.verify_fraction() <= 1)) {
    return rpc::InvalidFieldError("spec.verify_fraction",
                                  absl::StrCat("must be in [0, 1], got ", spec.verify_fraction()));
  }
  if (spec.has_local_steps()) {
    if (spec.local_steps() < 1 || spec.local_steps() > v1::LIMIT_MAX_LOCAL_STEPS) {
      return rpc::InvalidFieldError(
          "spec.local_steps",
          absl::StrCat("must be 1 to ", v1::LIMIT_MAX_LOCAL_STEPS, ", got ", spec.local_steps()));
    }
    if (spec.verify_fraction() > 0) {
      return rpc::InvalidFieldError("spec.verify_fraction",
                                    "must be 0 with local_steps: spot checks compare two workers' results of "
                                    "one shard, and local steps "
                                    "depend on each worker's own inner optimizer");
    }
    if (spec.has_round_time_budget_seconds() &&
        !(spec.round_time_budget_seconds() > 0 && std::isfinite(spec.round_time_budget_seconds()))) {
      return rpc::InvalidFieldError(
          "spec.round_time_budget_seconds",
          absl::StrCat("must be a positive number of seconds, got ", spec.round_time_budget_seconds()));
    }
    if (absl::Status outer = wire::ValidateOptimizer(spec.outer_optimizer(), "spec.outer_optimizer");
        !outer.ok()) {
      return WithFieldDetail(outer);
    }
  } else if (spec.has_round_time_budget_seconds()) {
    return rpc::InvalidFieldError("spec.round_time_budget_seconds", "only with local_steps");
  } else if (spec.has_outer_optimizer()) {
    return rpc::InvalidFieldError("spec.outer_optimizer", "only with local_steps");
  }
  if (absl::Status bounded = CheckCounterBounds(spec); !bounded.ok()) return bounded;
  for (const auto& [field, value] :
       {std::pair<const char*, v1::Compression>{"spec.compression.pseudo_gradients",
                                                spec.compression().pseudo_gradients()},
        {"spec.compression.parameters", spec.compression().parameters()}}) {
    if (!v1::Compression_IsValid(value)) {
      return rpc::InvalidFieldError(field, absl::StrCat("unknown encoding ", static_cast<int>(value)));
    }
  }
  if (performer::IsCompressed(spec.compression().pseudo_gradients()) && !spec.has_local_steps()) {
    return rpc::InvalidFieldError("spec.compression.pseudo_gradients",
                                  "only with local_steps: synchronous rounds return exact gradients");
  }
  if (spec.has_quarantine_after() && spec.quarantine_after() < 1) {
    return rpc::InvalidFieldError("spec.quarantine_after",
                                  absl::StrCat("must be ≥ 1, got ", spec.quarantine_after()));
  }
  if (spec.constraints().min_memory_bytes() < 0)
    return rpc::InvalidFieldError("spec.constraints.min_memory_bytes", "must be ≥ 0");
  for (const std::string& kind : spec.constraints().device_kinds()) {
    if (kind != "cpu" && kind != "cuda")
      return rpc::InvalidFieldError("spec.constraints.device_kinds",
                                    absl::StrCat("\"", kind, "\" is not cpu or cuda"));
  }
  if (spec.has_dtype() && spec.dtype() != v1::DTYPE_FLOAT32 && spec.dtype() != v1::DTYPE_FLOAT64) {
    return rpc::InvalidFieldError("spec.dtype", "must be DTYPE_FLOAT32 or DTYPE_FLOAT64");
  }
  if (spec.bf16_products() && spec.dtype() == v1::DTYPE_FLOAT64) {
    return rpc::InvalidFieldError("spec.bf16_products",
                                  performer::Bf16ProductsDTypeError(performer::DType::kFloat64));
  }
  // Before anything is allocated: a valid config may still ask for terabytes (2^40 parameters).
  const int64_t dtype_bytes = spec.dtype() == v1::DTYPE_FLOAT64 ? 8 : 4;
  const int64_t model_bytes = prepared.config.parameter_count() * dtype_bytes;
  if (model_bytes > max_model_bytes_) {
    v1::ErrorDetail detail;
    detail.set_required_bytes(model_bytes);
    detail.set_limit_bytes(max_model_bytes_);
    return rpc::AttachErrorDetail(
        absl::ResourceExhaustedError(absl::StrCat(
            "spec.model: ", prepared.config.parameter_count(), " parameters take ",
            planner::HumanBytes(static_cast<double>(model_bytes)), " in ",
            dtype_bytes == 8 ? "float64" : "float32", "; this coordinator trains models of up to ",
            planner::HumanBytes(static_cast<double>(max_model_bytes_)), " (--max_model_bytes)")),
        detail);
  }
  if (spec.model().has_init_readout_scale()) {
    const double scale = spec.model().init_readout_scale();
    if (!spec.model().has_config()) {
      return rpc::InvalidFieldError("spec.model.init_readout_scale",
                                    "only for a fresh model (spec.model.config)");
    }
    if (!(scale > 0 && scale <= 10)) {
      return rpc::InvalidFieldError("spec.model.init_readout_scale",
                                    absl::StrCat("must be in (0, 10], got ", scale));
    }
  }
  if (!spec.trainable().empty()) {
    absl::StatusOr<std::vector<int>> trainable =
        performer::SelectParameters(performer::ParameterNames(prepared.config), spec.trainable());
    if (!trainable.ok()) return WithFieldDetail(trainable.status());
    if (spec.has_local_steps()) {
      return rpc::InvalidFieldError("spec.trainable",
                                    "not with local_steps: inner optimizers train every parameter");
    }
    if (performer::IsCompressed(spec.compression().parameters())) {
      return rpc::InvalidFieldError(
          "spec.trainable",
          "not with compression.parameters: a job that trains a subset sends workers only "
          "that subset's new values, exactly");
    }
  }
  absl::StatusOr<JobData> data = LoadData(spec, prepared.config);
  if (!data.ok()) return data.status();
  prepared.data = *std::move(data);
  if (load_initial && prepared.initial.empty()) {
    absl::StatusOr<std::vector<at::Tensor>> fresh = FreshParameters(spec, prepared.config);
    if (!fresh.ok()) return fresh.status();
    prepared.initial = *std::move(fresh);
  }
  return prepared;
}

absl::StatusOr<std::vector<at::Tensor>> JobPreparer::FreshParameters(const v1::JobSpec& spec,
                                                                     const performer::ModelConfig& config) {
  // A fresh model, drawn from the seed.
  performer::InitOptions init;
  init.readout_scale = spec.model().has_init_readout_scale() ? spec.model().init_readout_scale() : 1.0;
  const performer::DType dtype =
      spec.dtype() == v1::DTYPE_FLOAT64 ? performer::DType::kFloat64 : performer::DType::kFloat32;
  try {
    absl::StatusOr<performer::PerformerModel> model =
        performer::PerformerModel::Create(config, dtype, at::kCPU, spec.seed(), init);
    if (!model.ok()) return model.status();
    return model->parameters();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("initialising the model: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<std::vector<at::Tensor>> JobPreparer::InitialParameters(const v1::JobSpec& spec) const {
  std::vector<at::Tensor> initial;
  absl::StatusOr<performer::ModelConfig> config = ResolveModel(spec.model(), &initial);
  if (!config.ok()) return config.status();
  if (!initial.empty()) return initial;
  return FreshParameters(spec, *config);
}

absl::Status JobPreparer::CheckSomeWorkerFits(const v1::JobSpec& spec, const performer::ModelConfig& config,
                                              int64_t documents) const {
  std::vector<WorkerHandle> eligible = registry_->LiveWorkers(spec.constraints());
  if (eligible.empty()) return absl::OkStatus();  // waits in QUEUED
  std::sort(eligible.begin(), eligible.end(), [](const WorkerHandle& a, const WorkerHandle& b) {
    return a.memory_budget_bytes > b.memory_budget_bytes;
  });
  std::optional<v1::MemoryPlan> largest;
  const int64_t reserved = ReservedBytesPerWorker(spec, config);
  for (const WorkerHandle& worker : eligible) {
    absl::StatusOr<planner::PlanSearchRequest> request =
        planner::JobPlanSearchRequest(spec, config, documents, max_sequences_per_shard_, safety_margin_);
    if (!request.ok()) return request.status();
    request->memory_budget_bytes = PlanSearchBudget(worker.memory_budget_bytes, reserved, safety_margin_);
    absl::StatusOr<v1::MemoryPlan> plan = planner::SearchMemoryPlan(*request, worker.profile, false);
    if (!plan.ok()) return plan.status();
    if (!plan->has_refusal()) return absl::OkStatus();
    if (!largest.has_value()) largest = *plan;
  }
  const WorkerHandle& best = eligible.front();
  v1::ErrorDetail detail;
  detail.set_required_bytes(largest->least_peak_bytes());
  detail.set_budget_bytes(best.memory_budget_bytes);
  detail.set_usable_bytes(largest->usable_bytes());
  return rpc::AttachErrorDetail(
      absl::ResourceExhaustedError(absl::StrCat(
          "model needs at least ", planner::HumanBytes(largest->least_peak_bytes()),
          " at C = 1; the largest eligible budget allows ", planner::HumanBytes(largest->usable_bytes()),
          " (worker ", best.worker_id, ", ", planner::HumanBytes(best.memory_budget_bytes), " less a ",
          static_cast<int>(safety_margin_ * 100 + 0.5), "% margin",
          reserved > 0
              ? absl::StrCat(" and ", planner::HumanBytes(reserved), " for the local steps' inner optimizer")
              : "",
          ")")),
      detail);
}

}  // namespace slimfit::server
