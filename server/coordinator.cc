#include "server/coordinator.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/time_util.h"
#include "performer/model_checkpoint.h"
#include "performer/performer_model.h"
#include "performer/safetensors.h"
#include "planner/device_profile.h"
#include "planner/device_profile_io.h"
#include "planner/plan_proto.h"
#include "planner/plan_search.h"
#include "base/log.h"
#include "proto/rpc_util.h"
#include "base/sha256.h"
#include "proto/token_codec.h"

namespace slimfit::server {
namespace {

namespace fs = std::filesystem;
using google::protobuf::util::TimeUtil;

google::protobuf::Timestamp Now() { return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(absl::Now())); }

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED || state == v1::JOB_STATE_CANCELLED;
}

bool IsDatasetType(const std::string& type) { return type == "text/plain" || type == "application/x-slimfit-tokens"; }
bool IsCheckpointType(const std::string& type) {
  return type == "application/x-safetensors" || type == "application/x-pytorch";
}

absl::Status Invalid(absl::string_view field, const std::string& why) {
  v1::ErrorDetail detail;
  detail.set_field(std::string(field));
  return rpc::AttachErrorDetail(absl::InvalidArgumentError(absl::StrCat(field, ": ", why)), detail);
}

absl::Status NotFound(absl::string_view kind, const std::string& id, const std::string& message) {
  v1::ErrorDetail detail;
  detail.set_resource_kind(std::string(kind));
  detail.set_resource_id(id);
  return rpc::AttachErrorDetail(absl::NotFoundError(message), detail);
}

absl::StatusOr<size_t> ParsePageToken(const std::string& token, absl::string_view kind) {
  if (token.empty()) return 0;
  std::pair<std::string, std::string> parts = absl::StrSplit(token, absl::MaxSplits(':', 1));
  uint64_t offset = 0;
  if (parts.first != kind || !absl::SimpleAtoi(parts.second, &offset)) {
    return absl::OutOfRangeError(absl::StrCat("page_token \"", token, "\" is not from this listing"));
  }
  return static_cast<size_t>(offset);
}

class FileUploadSink : public UploadSink {
 public:
  FileUploadSink(StateStore* store, std::string uploads_dir, v1::UploadMetadata metadata, std::string id)
      : store_(store), uploads_dir_(std::move(uploads_dir)), metadata_(std::move(metadata)), id_(std::move(id)) {
    static std::mt19937_64 generator(std::random_device{}());
    temp_path_ = absl::StrFormat("%s/.upload-%016x", uploads_dir_, generator());
    out_.open(temp_path_, std::ios::binary | std::ios::trunc);
  }
  ~FileUploadSink() override {
    out_.close();
    std::error_code ignored;
    fs::remove(temp_path_, ignored);
  }

  absl::Status Write(const std::string& chunk) override {
    if (!out_) return absl::InternalError(absl::StrCat("cannot write ", temp_path_));
    if (chunk.empty() || chunk.size() > static_cast<size_t>(v1::LIMIT_MAX_CHUNK_BYTES)) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk of ", chunk.size(), " bytes; chunks hold 1..", v1::LIMIT_MAX_CHUNK_BYTES, " bytes"));
    }
    received_ += static_cast<int64_t>(chunk.size());
    if (received_ > metadata_.total_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("received more than the declared total_bytes ",
                                                     metadata_.total_bytes()));
    }
    hasher_.Update(chunk);
    out_.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (!out_) return absl::ResourceExhaustedError(absl::StrCat("writing the upload failed (disk full?) after ", received_, " bytes"));
    return absl::OkStatus();
  }

  absl::StatusOr<v1::DatasetInfo> Finish() override {
    out_.close();
    if (received_ != metadata_.total_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("received ", received_, " bytes; metadata.total_bytes is ", metadata_.total_bytes()));
    }
    const std::string digest = hasher_.FinishHex();
    if (digest != metadata_.sha256()) {
      return absl::DataLossError(absl::StrCat("SHA-256 of the received bytes is ", digest, "; metadata.sha256 is ",
                                              metadata_.sha256()));
    }
    DatasetRecord record;
    record.info.set_dataset_id(id_);
    record.info.set_name(metadata_.name());
    record.info.set_content_type(metadata_.content_type());
    record.info.set_total_bytes(received_);
    record.info.set_sha256(digest);
    *record.info.mutable_created_at() = Now();
    record.token_encoding = metadata_.token_encoding();
    if (metadata_.has_document_separator()) record.document_separator = metadata_.document_separator();
    std::string suffix;
    if (metadata_.content_type() == "application/x-safetensors") suffix = ".safetensors";
    if (metadata_.content_type() == "application/x-pytorch") suffix = ".pt";
    record.path = absl::StrCat(uploads_dir_, "/", id_, suffix);
    if (IsDatasetType(metadata_.content_type())) {
      std::ifstream in(temp_path_, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      absl::StatusOr<TokenStream> stream =
          ParseDataset(bytes, metadata_.content_type(), metadata_.token_encoding(), record.document_separator);
      if (!stream.ok()) return stream.status();
      if (stream->tokens.size() < 2) {
        return absl::InvalidArgumentError(absl::StrCat("dataset holds ", stream->tokens.size(),
                                                       " tokens; at least 2 are needed"));
      }
      record.info.set_tokens(static_cast<int64_t>(stream->tokens.size()));
      record.info.set_documents(static_cast<int64_t>(stream->doc_starts.size()));
    }
    // Durable before it is acknowledged: the bytes, then the rename.
    if (const int fd = open(temp_path_.c_str(), O_RDONLY); fd >= 0) {
      const bool synced = fsync(fd) == 0;
      close(fd);
      if (!synced) return absl::InternalError(absl::StrCat("fsync of ", temp_path_, " failed"));
    }
    std::error_code error;
    fs::rename(temp_path_, record.path, error);
    if (const int dir = open(uploads_dir_.c_str(), O_RDONLY | O_DIRECTORY); dir >= 0) {
      fsync(dir);
      close(dir);
    }
    if (error) return absl::InternalError(absl::StrCat("storing the upload at ", record.path, ": ", error.message()));
    if (absl::Status stored = store_->PutDataset(record); !stored.ok()) return stored;
    base::LogInfo("stored upload ", id_, " (", metadata_.name(), ", ", received_, " bytes, ", record.info.tokens(),
                 " tokens)");
    return record.info;
  }

 private:
  StateStore* store_;
  std::string uploads_dir_;
  v1::UploadMetadata metadata_;
  std::string id_;
  std::string temp_path_;
  std::ofstream out_;
  base::Sha256Hasher hasher_;
  int64_t received_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options) {
  if (options.state_dir.empty()) return absl::InvalidArgumentError("--state_dir is required");
  std::error_code error;
  for (const char* sub : {"", "/uploads", "/jobs"}) {
    fs::create_directories(options.state_dir + sub, error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", options.state_dir, sub, ": ", error.message()));
    }
  }
  std::unique_ptr<Coordinator> coordinator(new Coordinator(std::move(options)));
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(coordinator->options_.state_dir + "/state.db");
  if (!store.ok()) return store.status();
  coordinator->store_ = *std::move(store);
  absl::StatusOr<std::unique_ptr<WorkerRegistry>> registry =
      WorkerRegistry::Create(coordinator->store_.get(), coordinator->options_.registry);
  if (!registry.ok()) return registry.status();
  coordinator->registry_ = *std::move(registry);
  if (absl::Status resumed = coordinator->ResumeJobs(); !resumed.ok()) return resumed;
  Coordinator* raw = coordinator.get();
  coordinator->liveness_ = std::thread([raw] { raw->LivenessLoop(); });
  return coordinator;
}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::Shutdown() {
  if (shutting_down_.exchange(true)) return;
  std::map<std::string, std::shared_ptr<JobRunner>> runners;
  {
    absl::MutexLock lock(&mutex_);
    runners = runners_;
  }
  // Every runner stops its calls first, then all are joined: a runner waiting for a worker lease
  // another runner holds must not wait for that runner's call to run out.
  for (auto& [id, runner] : runners) runner->RequestStop();
  for (auto& [id, runner] : runners) runner->Stop();
  signal_.Notify();
  if (liveness_.joinable()) liveness_.join();
}

void Coordinator::LivenessLoop() {
  while (!shutting_down_.load()) {
    if (!registry_->ExpireSilentWorkers().empty()) signal_.Notify();
    absl::SleepFor(std::min(absl::Milliseconds(250), options_.registry.lost_after / 4));
  }
}

absl::Status Coordinator::ResumeJobs() {
  absl::StatusOr<std::vector<v1::Job>> jobs = store_->ListJobs();
  if (!jobs.ok()) return jobs.status();
  for (const v1::Job& job : *jobs) {
    if (IsTerminal(job.state())) continue;
    // A job that crashed before its round-0 checkpoint starts again from its initial parameters.
    absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_->Checkpoints(job.job_id());
    if (!checkpoints.ok()) return checkpoints.status();
    absl::StatusOr<PreparedJob> prepared = PrepareJob(job.spec(), /*load_initial=*/checkpoints->empty());
    absl::Status started = prepared.ok() ? StartRunner(job, *std::move(prepared)) : prepared.status();
    if (!started.ok()) {
      v1::Job failed = job;
      failed.set_state(v1::JOB_STATE_FAILED);
      failed.set_state_reason(absl::StrCat("could not resume after a restart: ", started.message()));
      *failed.mutable_finished_at() = Now();
      *failed.mutable_state_changed_at() = failed.finished_at();
      base::LogError(job.job_id(), ": ", failed.state_reason());
      if (absl::Status stored = store_->PutJob(failed); !stored.ok()) return stored;
      absl::StatusOr<int64_t> last = store_->LastEventSequence(job.job_id());
      if (!last.ok()) return last.status();
      v1::JobEvent event;
      event.set_sequence(*last + 1);
      event.set_job_id(job.job_id());
      *event.mutable_time() = failed.finished_at();
      event.mutable_state_changed()->set_previous(job.state());
      event.mutable_state_changed()->set_state(v1::JOB_STATE_FAILED);
      event.mutable_state_changed()->set_reason(failed.state_reason());
      if (absl::Status stored = store_->AppendEvent(event); !stored.ok()) return stored;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<UploadSink>> Coordinator::BeginUpload(const v1::UploadMetadata& metadata,
                                                                    std::optional<v1::DatasetInfo>* existing) {
  if (metadata.name().empty() || metadata.name().size() > static_cast<size_t>(v1::LIMIT_MAX_NAME_BYTES)) {
    return Invalid("metadata.name", "must be 1..256 bytes");
  }
  const std::string& type = metadata.content_type();
  if (!IsDatasetType(type) && !IsCheckpointType(type)) {
    return Invalid("metadata.content_type",
                   absl::StrCat("\"", type, "\" is not text/plain, application/x-slimfit-tokens, "
                                            "application/x-safetensors or application/x-pytorch"));
  }
  if (metadata.total_bytes() < 1) return Invalid("metadata.total_bytes", "must be ≥ 1");
  if (metadata.total_bytes() > options_.upload_limit_bytes) {
    v1::ErrorDetail detail;
    detail.set_limit_bytes(options_.upload_limit_bytes);
    return rpc::AttachErrorDetail(
        absl::ResourceExhaustedError(absl::StrCat("upload of ", metadata.total_bytes(),
                                                  " bytes is above the coordinator's limit of ",
                                                  options_.upload_limit_bytes, " bytes")),
        detail);
  }
  if (!base::IsSha256Hex(metadata.sha256())) {
    return Invalid("metadata.sha256", "must be 64 lowercase hexadecimal characters");
  }
  if (type == "application/x-slimfit-tokens") {
    if (rpc::TokenWidth(metadata.token_encoding()) == 0) {
      return Invalid("metadata.token_encoding", "required for application/x-slimfit-tokens");
    }
  } else if (metadata.token_encoding() != v1::TOKEN_ENCODING_UNSPECIFIED) {
    return Invalid("metadata.token_encoding", absl::StrCat("must be UNSPECIFIED for ", type));
  }
  if (metadata.has_document_separator()) {
    if (!IsDatasetType(type)) return Invalid("metadata.document_separator", "only for datasets");
    if (metadata.document_separator().empty() || metadata.document_separator().size() > 64) {
      return Invalid("metadata.document_separator", "must be 1..64 bytes");
    }
  }
  // Content-addressed: the same bytes, type and separator give the same id.
  const std::string key = absl::StrCat(type, "|", metadata.sha256(), "|", metadata.token_encoding(), "|",
                                       metadata.has_document_separator() ? metadata.document_separator() : "");
  const std::string id = absl::StrCat(IsDatasetType(type) ? "ds-" : "ck-", base::Sha256Hex(key).substr(0, 16));
  absl::StatusOr<std::optional<DatasetRecord>> stored = store_->GetDataset(id);
  if (!stored.ok()) return stored.status();
  if (stored->has_value()) {
    v1::DatasetInfo info = (*stored)->info;
    info.set_already_existed(true);
    *existing = info;
    return std::unique_ptr<UploadSink>();
  }
  return std::unique_ptr<UploadSink>(new FileUploadSink(store_.get(), options_.state_dir + "/uploads", metadata, id));
}

absl::StatusOr<performer::ModelConfig> Coordinator::ModelOf(const v1::ModelSpec& model,
                                                            std::vector<at::Tensor>* initial) {
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
        if (ref.has_round()) return Invalid("spec.model.checkpoint.round", "only with job_id");
        absl::StatusOr<std::optional<DatasetRecord>> record = store_->GetDataset(ref.upload_id());
        if (!record.ok()) return record.status();
        if (!record->has_value() || !IsCheckpointType((*record)->info.content_type())) {
          return NotFound("checkpoint", ref.upload_id(), absl::StrCat("no uploaded checkpoint ", ref.upload_id()));
        }
        path = (*record)->path;
        if ((*record)->info.content_type() == "application/x-pytorch" && !expected.has_value()) {
          return Invalid("spec.model.checkpoint.config", "required for a torch.save checkpoint");
        }
      } else if (ref.source_case() == v1::CheckpointRef::kJobId) {
        absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_->Checkpoints(ref.job_id());
        if (!checkpoints.ok()) return checkpoints.status();
        const CheckpointRecord* chosen = nullptr;
        for (const CheckpointRecord& c : *checkpoints) {
          if (!ref.has_round() || c.round == ref.round()) chosen = &c;
        }
        if (chosen == nullptr) {
          return NotFound("checkpoint", ref.job_id(),
                          absl::StrCat("job ", ref.job_id(), " has no checkpoint",
                                       ref.has_round() ? absl::StrCat(" of round ", ref.round()) : ""));
        }
        path = chosen->model_path;
      } else {
        return Invalid("spec.model.checkpoint", "set upload_id or job_id");
      }
      absl::StatusOr<performer::PerformerModel> loaded =
          performer::LoadModel(path, performer::DType::kFloat32, at::kCPU, expected);
      if (!loaded.ok()) {
        return absl::FailedPreconditionError(absl::StrCat("spec.model.checkpoint: ", loaded.status().message()));
      }
      if (initial != nullptr) *initial = loaded->parameters();
      return loaded->config();
    }
    default:
      return Invalid("spec.model", "set config (a fresh model) or checkpoint");
  }
}

absl::StatusOr<JobData> Coordinator::LoadData(const v1::JobSpec& spec, const performer::ModelConfig& config) {
  if (spec.dataset_ids_size() == 0) return Invalid("spec.dataset_ids", "at least one dataset is required");
  TokenStream stream;
  for (const std::string& id : spec.dataset_ids()) {
    absl::StatusOr<std::optional<DatasetRecord>> record = store_->GetDataset(id);
    if (!record.ok()) return record.status();
    if (!record->has_value() || !IsDatasetType((*record)->info.content_type())) {
      return NotFound("dataset", id, absl::StrCat("no dataset ", id));
    }
    std::ifstream in((*record)->path, std::ios::binary);
    if (!in) return absl::DataLossError(absl::StrCat("dataset ", id, ": stored file ", (*record)->path, " is missing"));
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<TokenStream> parsed = ParseDataset(bytes, (*record)->info.content_type(), (*record)->token_encoding,
                                                      (*record)->document_separator);
    if (!parsed.ok()) return parsed.status();
    AppendStream(&stream, *parsed);
  }
  const int width = rpc::TokenWidth(rpc::NarrowestTokenEncoding(config.vocab));
  if (spec.sequence_length() > v1::LIMIT_MAX_CHUNK_BYTES / width) {
    return Invalid("spec.sequence_length", absl::StrCat(spec.sequence_length(), " tokens of ", width,
                                                        " bytes do not fit one shard of ", v1::LIMIT_MAX_CHUNK_BYTES,
                                                        " bytes"));
  }
  return JobData::Create(std::move(stream), config.vocab, spec.sequence_length(), spec.tokens_per_round(),
                         spec.held_out_fraction(), spec.seed());
}

absl::StatusOr<Coordinator::PreparedJob> Coordinator::PrepareJob(const v1::JobSpec& spec, bool load_initial) {
  if (spec.name().size() > static_cast<size_t>(v1::LIMIT_MAX_NAME_BYTES)) return Invalid("spec.name", "longer than 256 bytes");
  PreparedJob prepared;
  absl::StatusOr<performer::ModelConfig> config = ModelOf(spec.model(), load_initial ? &prepared.initial : nullptr);
  if (!config.ok()) return config.status();
  prepared.config = *config;
  if (spec.sequence_length() < 2) return Invalid("spec.sequence_length", absl::StrCat("must be ≥ 2, got ", spec.sequence_length()));
  if (spec.tokens_per_round() < spec.sequence_length()) {
    return Invalid("spec.tokens_per_round", absl::StrCat(spec.tokens_per_round(), " is less than sequence_length ",
                                                         spec.sequence_length()));
  }
  if (spec.rounds() < 1) return Invalid("spec.rounds", absl::StrCat("must be ≥ 1, got ", spec.rounds()));
  if (absl::Status optimizer = ValidateOptimizer(spec.optimizer()); !optimizer.ok()) {
    v1::ErrorDetail detail;
    detail.set_field(std::string(optimizer.message().substr(0, optimizer.message().find(':'))));
    return rpc::AttachErrorDetail(optimizer, detail);
  }
  if (spec.eval_interval_rounds() < 0) return Invalid("spec.eval_interval_rounds", "must be ≥ 0");
  if (spec.has_checkpoint_interval_rounds() && spec.checkpoint_interval_rounds() < 1) {
    return Invalid("spec.checkpoint_interval_rounds", "must be ≥ 1");
  }
  if (spec.has_min_workers() && spec.min_workers() < 1) return Invalid("spec.min_workers", "must be ≥ 1");
  if (spec.constraints().min_memory_bytes() < 0) return Invalid("spec.constraints.min_memory_bytes", "must be ≥ 0");
  for (const std::string& kind : spec.constraints().device_kinds()) {
    if (kind != "cpu" && kind != "cuda") return Invalid("spec.constraints.device_kinds", absl::StrCat("\"", kind, "\" is not cpu or cuda"));
  }
  if (spec.has_dtype() && spec.dtype() != v1::DTYPE_FLOAT32 && spec.dtype() != v1::DTYPE_FLOAT64) {
    return Invalid("spec.dtype", "must be DTYPE_FLOAT32 or DTYPE_FLOAT64");
  }
  absl::StatusOr<JobData> data = LoadData(spec, prepared.config);
  if (!data.ok()) return data.status();
  prepared.data = *std::move(data);
  return prepared;
}

absl::Status Coordinator::CheckSomeWorkerFits(const v1::JobSpec& spec, const performer::ModelConfig& config,
                                              int64_t documents) {
  std::vector<WorkerHandle> eligible = registry_->LiveWorkers(spec.constraints());
  if (eligible.empty()) return absl::OkStatus();  // waits in QUEUED
  std::sort(eligible.begin(), eligible.end(),
            [](const WorkerHandle& a, const WorkerHandle& b) { return a.memory_budget_bytes > b.memory_budget_bytes; });
  std::optional<v1::MemoryPlan> largest;
  for (const WorkerHandle& worker : eligible) {
    planner::PlanSearchRequest request;
    request.workload.model = config;
    request.workload.seq_len = spec.sequence_length();
    request.workload.documents = documents;
    // A worker's shard of several sequences keeps a running gradient sum (see the worker's check).
    request.workload.gradient_sum = spec.tokens_per_round() / spec.sequence_length() > 1;
    request.memory_budget_bytes = worker.memory_budget_bytes;
    request.dtype = spec.dtype() == v1::DTYPE_FLOAT64 ? performer::DType::kFloat64 : performer::DType::kFloat32;
    request.safety_margin = options_.runner.safety_margin;
    absl::StatusOr<v1::MemoryPlan> plan = planner::SearchMemoryPlan(request, worker.profile, false);
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
          "model needs at least ", planner::HumanBytes(largest->least_peak_bytes()), " at C = 1; the largest eligible budget allows ",
          planner::HumanBytes(largest->usable_bytes()), " (worker ", best.worker_id, ", ",
          planner::HumanBytes(best.memory_budget_bytes), " less a ",
          static_cast<int>(options_.runner.safety_margin * 100 + 0.5), "% margin)")),
      detail);
}

absl::Status Coordinator::StartRunner(const v1::Job& job, PreparedJob prepared) {
  std::vector<at::Tensor> initial = std::move(prepared.initial);
  const performer::DType dtype =
      job.spec().dtype() == v1::DTYPE_FLOAT64 ? performer::DType::kFloat64 : performer::DType::kFloat32;
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_->Checkpoints(job.job_id());
  if (!checkpoints.ok()) return checkpoints.status();
  if (initial.empty() && checkpoints->empty()) {
    try {
      absl::StatusOr<performer::PerformerModel> model =
          performer::PerformerModel::Create(prepared.config, dtype, at::kCPU, job.spec().seed());
      if (!model.ok()) return model.status();
      initial = model->parameters();
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("initialising the model: ", e.what_without_backtrace()));
    }
  }
  RunnerDeps deps;
  deps.store = store_.get();
  deps.registry = registry_.get();
  deps.leases = &leases_;
  deps.signal = &signal_;
  deps.job_dir = absl::StrCat(options_.state_dir, "/jobs/", job.job_id());
  deps.worker_token = options_.worker_token;
  deps.options = options_.runner;
  std::error_code error;
  fs::create_directories(deps.job_dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", deps.job_dir, ": ", error.message()));
  absl::StatusOr<std::unique_ptr<JobRunner>> runner =
      JobRunner::Create(job, *std::move(prepared.data), prepared.config, std::move(initial), std::move(deps));
  if (!runner.ok()) return runner.status();
  std::shared_ptr<JobRunner> shared = *std::move(runner);
  {
    absl::MutexLock lock(&mutex_);
    runners_[job.job_id()] = shared;
  }
  shared->Start();
  return absl::OkStatus();
}

std::shared_ptr<JobRunner> Coordinator::Runner(const std::string& job_id) {
  absl::MutexLock lock(&mutex_);
  auto it = runners_.find(job_id);
  return it == runners_.end() ? nullptr : it->second;
}

absl::StatusOr<v1::Job> Coordinator::SubmitJob(const v1::SubmitJobRequest& request) {
  if (request.request_id().size() > static_cast<size_t>(v1::LIMIT_MAX_NAME_BYTES)) {
    return Invalid("request_id", "longer than 256 bytes");
  }
  // One submission at a time: a request id is looked up and recorded atomically.
  absl::MutexLock submit_lock(&submit_mutex_);
  if (!request.request_id().empty()) {
    absl::StatusOr<std::optional<v1::Job>> existing = store_->FindJobByRequestId(request.request_id());
    if (!existing.ok()) return existing.status();
    if (existing->has_value()) return **existing;
  }
  absl::StatusOr<PreparedJob> prepared = PrepareJob(request.spec(), /*load_initial=*/true);
  if (!prepared.ok()) return prepared.status();
  if (absl::Status fits =
          CheckSomeWorkerFits(request.spec(), prepared->config, prepared->data->max_documents_per_sequence());
      !fits.ok()) {
    return fits;
  }
  absl::StatusOr<int64_t> number = store_->NextJobNumber();
  if (!number.ok()) return number.status();
  v1::Job job;
  job.set_job_id(absl::StrFormat("job-%06d", *number));
  *job.mutable_spec() = request.spec();
  if (job.spec().name().empty()) job.mutable_spec()->set_name(job.job_id());
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_state_reason("waiting for eligible workers");
  *job.mutable_created_at() = Now();
  *job.mutable_state_changed_at() = job.created_at();
  job.mutable_progress()->set_rounds(request.spec().rounds());
  job.mutable_progress()->set_parameter_version(1);
  job.set_training_tokens(prepared->data->training_tokens());
  job.set_held_out_tokens(prepared->data->held_out_tokens());
  if (absl::Status stored = store_->PutJob(job, request.request_id()); !stored.ok()) return stored;
  v1::JobEvent created;
  created.set_sequence(1);
  created.set_job_id(job.job_id());
  *created.mutable_time() = Now();
  created.mutable_state_changed()->set_previous(v1::JOB_STATE_UNSPECIFIED);
  created.mutable_state_changed()->set_state(v1::JOB_STATE_QUEUED);
  created.mutable_state_changed()->set_reason("submitted");
  if (absl::Status stored = store_->AppendEvent(created); !stored.ok()) return stored;
  base::LogInfo(job.job_id(), ": submitted (", job.spec().rounds(), " rounds, L = ", job.spec().sequence_length(), ", ",
               job.training_tokens(), " training tokens)");
  if (absl::Status started = StartRunner(job, *std::move(prepared)); !started.ok()) {
    job.set_state(v1::JOB_STATE_FAILED);
    job.set_state_reason(absl::StrCat("could not start: ", started.message()));
    (void)store_->PutJob(job);
    return started;
  }
  return job;
}

absl::StatusOr<v1::Job> Coordinator::GetJob(const std::string& job_id) {
  if (std::shared_ptr<JobRunner> runner = Runner(job_id); runner != nullptr) return runner->Snapshot();
  absl::StatusOr<std::optional<v1::Job>> job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (!job->has_value()) return NotFound("job", job_id, absl::StrCat("no job ", job_id));
  return **job;
}

absl::StatusOr<v1::ListJobsResponse> Coordinator::ListJobs(const v1::ListJobsRequest& request) {
  if (request.page_size() < 0 || request.page_size() > v1::LIMIT_MAX_PAGE_SIZE) {
    return Invalid("page_size", absl::StrCat("must be 0..", v1::LIMIT_MAX_PAGE_SIZE));
  }
  absl::StatusOr<size_t> offset = ParsePageToken(request.page_token(), "jobs");
  if (!offset.ok()) return offset.status();
  const size_t page = request.page_size() == 0 ? 50 : static_cast<size_t>(request.page_size());
  absl::StatusOr<std::vector<v1::Job>> jobs = store_->ListJobs();
  if (!jobs.ok()) return jobs.status();
  std::vector<v1::Job> selected;
  for (const v1::Job& stored : *jobs) {
    absl::StatusOr<v1::Job> job = GetJob(stored.job_id());  // live state for running jobs
    const v1::Job& current = job.ok() ? *job : stored;
    if (request.states_size() > 0 &&
        std::find(request.states().begin(), request.states().end(), current.state()) == request.states().end()) {
      continue;
    }
    selected.push_back(current);
  }
  v1::ListJobsResponse response;
  for (size_t i = *offset; i < selected.size() && i < *offset + page; ++i) *response.add_jobs() = selected[i];
  if (*offset + page < selected.size()) response.set_next_page_token(absl::StrCat("jobs:", *offset + page));
  return response;
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(const v1::CancelJobRequest& request) {
  if (request.reason().size() > 1024) return Invalid("reason", "longer than 1024 bytes");
  absl::StatusOr<v1::Job> job = GetJob(request.job_id());
  if (!job.ok()) return job.status();
  if (job->state() == v1::JOB_STATE_CANCELLED) return job;
  if (IsTerminal(job->state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " already ", v1::JobState_Name(job->state()), ": not cancellable"));
  }
  std::shared_ptr<JobRunner> runner = Runner(request.job_id());
  if (runner == nullptr) return absl::InternalError(absl::StrCat("job ", request.job_id(), " has no runner"));
  runner->Cancel(request.reason());
  for (int i = 0; i < 600 && !runner->terminal(); ++i) absl::SleepFor(absl::Milliseconds(50));
  return runner->Snapshot();
}

absl::Status Coordinator::WatchJob(const v1::WatchJobRequest& request,
                                   const std::function<bool(const v1::JobEvent&)>& emit,
                                   const std::function<bool()>& cancelled) {
  if (request.after_sequence() < 0) return Invalid("after_sequence", "must be ≥ 0");
  uint64_t seen = signal_.count();
  // The sequence is read before the snapshot: an event in between is then replayed, not lost.
  absl::StatusOr<int64_t> last = store_->LastEventSequence(request.job_id());
  if (!last.ok()) return last.status();
  absl::StatusOr<v1::Job> job = GetJob(request.job_id());
  if (!job.ok()) return job.status();
  v1::JobEvent snapshot;
  snapshot.set_sequence(*last);
  snapshot.set_job_id(request.job_id());
  *snapshot.mutable_time() = Now();
  *snapshot.mutable_snapshot() = *job;
  if (!emit(snapshot)) return absl::OkStatus();
  int64_t after = request.from_start() ? 0 : request.after_sequence() > 0 ? request.after_sequence() : *last;
  const bool terminal_at_start = IsTerminal(job->state());
  absl::Time quiet_since = absl::InfinitePast();
  while (true) {
    absl::StatusOr<std::vector<v1::JobEvent>> events = store_->Events(request.job_id(), after);
    if (!events.ok()) return events.status();
    for (const v1::JobEvent& event : *events) {
      if (!emit(event)) return absl::OkStatus();
      after = event.sequence();
      if (event.has_state_changed() && IsTerminal(event.state_changed().state())) return absl::OkStatus();
    }
    if (events->empty()) {
      // A terminal job's last event is its terminal state change; the stream ends after it. A job
      // already terminal when the stream began has nothing more to say; one that turned terminal
      // without an event (a failure recorded outside its runner) gets a second's grace.
      if (terminal_at_start) return absl::OkStatus();
      absl::StatusOr<v1::Job> now = GetJob(request.job_id());
      if (!now.ok()) return now.status();
      if (IsTerminal(now->state())) {
        if (quiet_since == absl::InfinitePast()) quiet_since = absl::Now();
        if (absl::Now() - quiet_since > absl::Seconds(1)) return absl::OkStatus();
      }
    }
    if (cancelled()) return absl::CancelledError("client went away");
    if (shutting_down_.load()) return absl::UnavailableError("coordinator shutting down: reconnect");
    seen = signal_.WaitAfter(seen, absl::Milliseconds(terminal_at_start ? 0 : 250));
  }
}

absl::StatusOr<v1::ListWorkersResponse> Coordinator::ListWorkers(const v1::ListWorkersRequest& request) {
  if (request.page_size() < 0 || request.page_size() > v1::LIMIT_MAX_PAGE_SIZE) {
    return Invalid("page_size", absl::StrCat("must be 0..", v1::LIMIT_MAX_PAGE_SIZE));
  }
  absl::StatusOr<size_t> offset = ParsePageToken(request.page_token(), "workers");
  if (!offset.ok()) return offset.status();
  const size_t page = request.page_size() == 0 ? 100 : static_cast<size_t>(request.page_size());
  std::vector<v1::WorkerInfo> workers = registry_->List(request.include_gone());
  v1::ListWorkersResponse response;
  for (size_t i = *offset; i < workers.size() && i < *offset + page; ++i) *response.add_workers() = workers[i];
  if (*offset + page < workers.size()) response.set_next_page_token(absl::StrCat("workers:", *offset + page));
  return response;
}

absl::StatusOr<v1::GetMemoryPlanResponse> Coordinator::GetMemoryPlan(const v1::GetMemoryPlanRequest& request) {
  planner::PlanSearchRequest search;
  performer::DType job_dtype = performer::DType::kFloat32;
  switch (request.workload_case()) {
    case v1::GetMemoryPlanRequest::kJobId: {
      absl::StatusOr<v1::Job> job = GetJob(request.job_id());
      if (!job.ok()) return job.status();
      absl::StatusOr<performer::ModelConfig> config = ModelOf(job->spec().model(), nullptr);
      if (!config.ok()) return config.status();
      search.workload.model = *config;
      search.workload.seq_len = job->spec().sequence_length();
      std::shared_ptr<JobRunner> runner = Runner(request.job_id());
      search.workload.documents = runner != nullptr ? runner->max_documents_per_sequence() : 1;
      search.workload.gradient_sum = job->spec().tokens_per_round() / job->spec().sequence_length() > 1;
      job_dtype = job->spec().dtype() == v1::DTYPE_FLOAT64 ? performer::DType::kFloat64 : performer::DType::kFloat32;
      if (request.has_dtype() && request.dtype() != planner::DTypeToProto(job_dtype)) {
        return Invalid("dtype", "must be absent or the job's dtype");
      }
      break;
    }
    case v1::GetMemoryPlanRequest::kSpec: {
      absl::StatusOr<performer::ModelConfig> config = ModelOf(request.spec().model(), nullptr);
      if (!config.ok()) return config.status();
      search.workload.model = *config;
      if (request.spec().sequence_length() < 1) return Invalid("spec.sequence_length", "must be ≥ 1");
      search.workload.seq_len = request.spec().sequence_length();
      search.workload.documents = request.spec().has_documents() ? request.spec().documents() : 1;
      if (search.workload.documents < 1) return Invalid("spec.documents", "must be ≥ 1");
      if (request.has_dtype()) {
        absl::StatusOr<performer::DType> dtype = planner::DTypeFromProto(request.dtype(), "dtype");
        if (!dtype.ok()) return dtype.status();
        job_dtype = *dtype;
      }
      break;
    }
    default:
      return Invalid("workload", "set job_id or spec");
  }
  search.dtype = job_dtype;
  search.objective = planner::ObjectiveFromProto(request.objective());
  search.safety_margin = request.has_safety_margin() ? request.safety_margin() : options_.runner.safety_margin;
  if (!(search.safety_margin >= 0 && search.safety_margin < 1)) return Invalid("safety_margin", "must be in [0, 1)");

  std::vector<v1::WorkerInfo> targets;
  std::string next_page_token;
  bool include_frontier = true;
  if (request.target_case() == v1::GetMemoryPlanRequest::kWorkerId) {
    std::optional<v1::WorkerInfo> info = registry_->Info(request.worker_id());
    if (!info.has_value()) return NotFound("worker", request.worker_id(), absl::StrCat("no worker ", request.worker_id()));
    if (info->state() == v1::WORKER_STATE_LOST) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", request.worker_id(), " is LOST"));
    }
    targets.push_back(*info);
    include_frontier = request.has_include_frontier() ? request.include_frontier() : true;
  } else if (request.target_case() == v1::GetMemoryPlanRequest::kAllWorkers && request.all_workers()) {
    include_frontier = request.has_include_frontier() ? request.include_frontier() : false;
    if (request.page_size() < 0 || request.page_size() > 50) return Invalid("page_size", "must be 0..50");
    absl::StatusOr<size_t> offset = ParsePageToken(request.page_token(), "plans");
    if (!offset.ok()) return offset.status();
    std::vector<v1::WorkerInfo> live = registry_->List(false);
    const size_t page = request.page_size() == 0 ? 20 : static_cast<size_t>(request.page_size());
    for (size_t i = *offset; i < live.size() && i < *offset + page; ++i) targets.push_back(live[i]);
    if (*offset + page < live.size()) next_page_token = absl::StrCat("plans:", *offset + page);
  } else {
    return Invalid("target", "set worker_id or all_workers");
  }
  v1::GetMemoryPlanResponse response;
  response.set_next_page_token(next_page_token);
  for (const v1::WorkerInfo& worker : targets) {
    search.memory_budget_bytes = worker.memory_budget_bytes();
    absl::StatusOr<v1::MemoryPlan> plan =
        planner::SearchMemoryPlan(search, planner::DeviceProfileFromProto(worker.profile()), include_frontier);
    if (!plan.ok()) return plan.status();
    plan->set_worker_id(worker.worker_id());
    *response.add_plans() = *std::move(plan);
  }
  return response;
}

absl::StatusOr<CheckpointRecord> Coordinator::ExportCheckpoint(const v1::ExportModelRequest& request,
                                                               v1::ExportHeader* header) {
  absl::StatusOr<v1::Job> job = GetJob(request.job_id());
  if (!job.ok()) return job.status();
  if (request.has_round() && request.round() < 0) return Invalid("round", "must be ≥ 0");
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_->Checkpoints(request.job_id());
  if (!checkpoints.ok()) return checkpoints.status();
  if (checkpoints->empty()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", request.job_id(), " has no checkpoint yet"));
  }
  const CheckpointRecord* chosen = &checkpoints->back();
  if (request.has_round()) {
    chosen = nullptr;
    for (const CheckpointRecord& c : *checkpoints) {
      if (c.round == request.round()) chosen = &c;
    }
    if (chosen == nullptr) {
      return NotFound("checkpoint", request.job_id(),
                      absl::StrCat("job ", request.job_id(), " has no checkpoint of round ", request.round()));
    }
  }
  absl::StatusOr<performer::ModelConfig> config = ModelOf(job->spec().model(), nullptr);
  if (!config.ok()) return config.status();
  header->set_job_id(request.job_id());
  header->set_round(chosen->round);
  header->set_parameter_version(chosen->parameter_version);
  *header->mutable_config() = planner::ModelConfigToProto(*config);
  header->set_total_bytes(chosen->bytes);
  header->set_file_name(absl::StrFormat("%s-r%d.safetensors", request.job_id(), chosen->round));
  return *chosen;
}

absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> Coordinator::Parameters(
    const v1::FetchParametersRequest& request) {
  std::shared_ptr<JobRunner> runner = Runner(request.job_id());
  if (runner == nullptr) {
    absl::StatusOr<v1::Job> job = GetJob(request.job_id());
    if (!job.ok()) return job.status();
    return absl::FailedPreconditionError(absl::StrCat("job ", request.job_id(), " is ", v1::JobState_Name(job->state())));
  }
  return runner->Parameters(request.parameter_version());
}

}  // namespace slimfit::server
