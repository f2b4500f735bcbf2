#include "worker/parameter_cache.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "wire/tensor_chunks.h"
#include "wire/tensor_codec.h"

namespace slimfit::worker {
namespace {

using performer::PerformerModel;

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// `status` with `code` and `prefix` before its message; payloads (the ErrorDetail) kept.
absl::Status Rewrap(const absl::Status& status, absl::StatusCode code, absl::string_view prefix) {
  absl::Status result(code, absl::StrCat(prefix, status.message()));
  status.ForEachPayload(
      [&](absl::string_view type_url, const absl::Cord& payload) { result.SetPayload(type_url, payload); });
  return result;
}

// The coordinator's answer to FetchParameters, as the error ComputeGradient should give.
absl::Status MapFetchError(const absl::Status& status, absl::string_view what) {
  const std::string prefix = absl::StrCat(what, ": ");
  switch (status.code()) {
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kNotFound:
      return Rewrap(status, status.code(), prefix);
    case absl::StatusCode::kFailedPrecondition:  // the job is terminal: its work is stale too
      return Rewrap(status, absl::StatusCode::kAborted, prefix);
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kResourceExhausted:
      return Rewrap(status, absl::StatusCode::kUnavailable,
                    absl::StrCat(prefix, "coordinator unavailable: "));
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return Rewrap(status, absl::StatusCode::kFailedPrecondition,
                    absl::StrCat(prefix, "the coordinator refused this worker's token: "));
    default:
      return Rewrap(status, absl::StatusCode::kInternal, prefix);
  }
}

// Checks the manifest against the request and against its own config; the expected tensors.
absl::StatusOr<std::vector<performer::TensorSpec>> CheckManifest(const v1::ParameterManifest& manifest,
                                                                 const std::string& job_id, uint64_t version,
                                                                 performer::ModelConfig* config,
                                                                 performer::DType* dtype) {
  if (manifest.job_id() != job_id || manifest.parameter_version() != version) {
    return absl::InternalError(absl::StrCat("the manifest is for job ", manifest.job_id(), " version ",
                                            manifest.parameter_version()));
  }
  absl::StatusOr<performer::ModelConfig> parsed =
      planner::ModelConfigFromProto(manifest.config(), "manifest.config");
  if (!parsed.ok()) return absl::InternalError(parsed.status().message());
  absl::StatusOr<performer::DType> parsed_dtype = planner::DTypeFromProto(manifest.dtype(), "manifest.dtype");
  if (!parsed_dtype.ok()) return absl::InternalError(parsed_dtype.status().message());
  *config = *parsed;
  *dtype = *parsed_dtype;

  const std::vector<std::string> names = performer::ParameterNames(*config);
  const std::vector<std::vector<int64_t>> shapes = performer::ParameterShapes(*config);
  if (manifest.tensors_size() != static_cast<int>(names.size())) {
    return absl::InternalError(absl::StrCat("the manifest lists ", manifest.tensors_size(),
                                            " tensors; a model with ", config->DebugString(), " has ",
                                            names.size()));
  }
  std::vector<performer::TensorSpec> specs;
  int64_t total_bytes = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const v1::TensorInfo& info = manifest.tensors(static_cast<int>(i));
    const v1::TensorInfo want = performer::ToTensorInfo({names[i], shapes[i]}, *dtype);
    if (info.name() != want.name() || ShapeString(info.shape()) != ShapeString(want.shape()) ||
        info.dtype() != want.dtype() || info.bytes() != want.bytes()) {
      return absl::InternalError(absl::StrCat(
          "manifest tensor ", i, " is \"", info.name(), "\" ", ShapeString(info.shape()), " (", info.bytes(),
          " bytes); the config ", "needs \"", want.name(), "\" ", ShapeString(want.shape()), " (",
          want.bytes(), " bytes) in ", performer::DTypeName(*dtype)));
    }
    total_bytes += info.bytes();
    specs.push_back({names[i], shapes[i]});
  }
  if (manifest.total_bytes() != total_bytes) {
    return absl::InternalError(absl::StrCat("the manifest's total_bytes is ", manifest.total_bytes(),
                                            "; its tensors hold ", total_bytes));
  }
  return specs;
}

}  // namespace

ParameterCache::ParameterCache(Options options) : options_(std::move(options)) {}

absl::StatusOr<std::shared_ptr<const PerformerModel>> ParameterCache::Fetch(
    const std::string& job_id, uint64_t version, absl::Time deadline, uint64_t base_version,
    std::shared_ptr<const PerformerModel> base) const {
  const std::string what = absl::StrCat("fetching the parameters of job ", job_id, " version ", version);
  const absl::Duration timeout =
      std::max(absl::ZeroDuration(), std::min(options_.fetch_timeout, deadline - absl::Now()));
  std::unique_ptr<grpc::ClientContext> context =
      rpc::MakeClientContext(options_.identity->BearerForCoordinator(),
                             std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  v1::FetchParametersRequest request;
  request.set_job_id(job_id);
  request.set_parameter_version(version);
  if (base != nullptr) request.set_base_version(base_version);
  std::unique_ptr<grpc::ClientReaderInterface<v1::FetchParametersResponse>> reader =
      options_.coordinator->FetchParameters(context.get(), request);

  // A broken stream: stop reading, end the call, report `status` (or the call's own error).
  auto abandon = [&](const absl::Status& status) -> absl::Status {
    context->TryCancel();
    reader->Finish().ok();
    return absl::InternalError(absl::StrCat(what, ": ", status.message()));
  };

  v1::FetchParametersResponse message;
  if (!reader->Read(&message)) {
    const grpc::Status finished = reader->Finish();
    if (finished.ok())
      return absl::InternalError(absl::StrCat(what, ": the stream ended before the manifest"));
    return MapFetchError(rpc::FromGrpcStatus(finished, "FetchParameters", context.get()), what);
  }
  if (!message.has_manifest()) return abandon(absl::InternalError("the first message is not a manifest"));
  performer::ModelConfig config;
  performer::DType dtype = performer::DType::kFloat32;
  absl::StatusOr<std::vector<performer::TensorSpec>> specs =
      CheckManifest(message.manifest(), job_id, version, &config, &dtype);
  if (!specs.ok()) return abandon(specs.status());
  // A difference to the version this cache holds, or the parameters themselves.
  const v1::ParameterManifest manifest = message.manifest();  // `message` is reused for the chunks
  const bool delta = manifest.base_version() != 0;
  if (delta && (base == nullptr || manifest.base_version() != base_version || base->dtype() != dtype)) {
    return abandon(
        absl::InternalError(absl::StrCat("the manifest is relative to version ", manifest.base_version(),
                                         ", which this worker did not offer")));
  }
  // Or, for a job that trains a subset of the parameters, only those tensors' new values.
  const bool partial = manifest.sent_tensors_size() > 0;
  if (partial && !delta)
    return abandon(absl::InternalError("the manifest sends some tensors but names no base"));
  if ((delta && !partial) != performer::IsCompressed(manifest.compression()) ||
      !v1::Compression_IsValid(manifest.compression())) {
    return abandon(absl::InternalError(absl::StrCat(
        "the manifest's compression ", v1::Compression_Name(manifest.compression()), " does not go with ",
        partial ? "tensors sent whole"
        : delta ? "a difference"
                : "whole parameters")));
  }
  const std::vector<performer::TensorSpec> expected = *specs;
  std::vector<performer::TensorSpec> sent;
  for (int i = 0; i < manifest.sent_tensors_size(); ++i) {
    const int index = manifest.sent_tensors(i);
    if (index < 0 || static_cast<size_t>(index) >= expected.size() ||
        (i > 0 && index <= manifest.sent_tensors(i - 1))) {
      return abandon(absl::InternalError(absl::StrCat("sent_tensors entry ", i, " = ", index,
                                                      " is out of order or outside the manifest's ",
                                                      expected.size(), " tensors")));
    }
    sent.push_back(expected[static_cast<size_t>(index)]);
  }
  performer::TensorAssembler assembler(partial ? sent : *std::move(specs), dtype,
                                       absl::StrCat("parameters of job ", job_id), manifest.compression());
  while (reader->Read(&message)) {
    if (!message.has_chunk())
      return abandon(absl::InternalError("a message after the manifest is not a chunk"));
    if (absl::Status s = assembler.Add(message.chunk()); !s.ok()) return abandon(s);
  }
  if (const grpc::Status finished = reader->Finish(); !finished.ok()) {
    return MapFetchError(rpc::FromGrpcStatus(finished, "FetchParameters", context.get()), what);
  }
  absl::StatusOr<std::vector<at::Tensor>> tensors = assembler.Finish();
  if (!tensors.ok()) return absl::InternalError(absl::StrCat(what, ": ", tensors.status().message()));
  std::map<std::string, at::Tensor> named;
  if (partial) {
    // The base's tensors, with the sent ones replaced (frozen tensors never change in a job).
    named = base->StateDict();
    for (size_t i = 0; i < sent.size(); ++i) named[sent[i].name] = (*tensors)[i];
  } else if (delta) {
    const std::map<std::string, at::Tensor> held = base->StateDict();
    for (size_t i = 0; i < expected.size(); ++i) {
      auto it = held.find(expected[i].name);
      if (it == held.end())
        return absl::InternalError(absl::StrCat(what, ": the base lacks ", expected[i].name));
      absl::StatusOr<at::Tensor> sum = performer::AddDifference(it->second, (*tensors)[i]);
      if (!sum.ok())
        return absl::InternalError(absl::StrCat(what, ": ", expected[i].name, ": ", sum.status().message()));
      named.emplace(expected[i].name, *std::move(sum));
    }
  } else {
    for (size_t i = 0; i < expected.size(); ++i) named.emplace(expected[i].name, (*tensors)[i]);
  }
  if (delta) {
    std::vector<at::Tensor> rebuilt;
    for (const performer::TensorSpec& spec : expected) rebuilt.push_back(named.at(spec.name));
    absl::StatusOr<std::string> digest = performer::TensorsSha256(rebuilt);
    if (!digest.ok()) return absl::InternalError(absl::StrCat(what, ": ", digest.status().message()));
    if (*digest != manifest.sha256()) {
      return absl::DataLossError(absl::StrCat(what, ": the parameters rebuilt from version ", base_version,
                                              " have SHA-256 ", *digest, "; the coordinator's are ",
                                              manifest.sha256()));
    }
  }
  // The received tensors become the model as they are: no second copy of the parameters while it is
  // built (a partial fetch's unchanged tensors are shared with the base, both read-only).
  tensors->clear();
  absl::StatusOr<PerformerModel> model =
      PerformerModel::FromOwnedTensors(config, std::move(named), dtype, options_.device);
  if (!model.ok()) return absl::InternalError(absl::StrCat(what, ": ", model.status().message()));
  return std::make_shared<const PerformerModel>(*std::move(model));
}

absl::StatusOr<std::shared_ptr<const PerformerModel>> ParameterCache::Get(const std::string& job_id,
                                                                          uint64_t version,
                                                                          performer::DType dtype,
                                                                          absl::Time deadline) {
  const Key key(job_id, version);
  std::shared_ptr<Entry> entry;
  bool fetch = false;
  uint64_t base_version = 0;  // the newest finished version held below `version`, if any
  std::shared_ptr<const PerformerModel> base_model;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      for (auto held = entries_.lower_bound(Key(job_id, 0));
           held != entries_.end() && held->first.first == job_id && held->first.second < version; ++held) {
        if (!held->second->done || !held->second->status.ok()) continue;
        base_version = held->first.second;
        base_model = held->second->models.at(held->second->dtype);
      }
      entry = std::make_shared<Entry>();
      entries_.emplace(key, entry);
      fetch = true;
    } else {
      entry = it->second;
      while (!entry->done) fetched_.Wait(&mu_);
      if (!entry->status.ok()) return entry->status;
      auto model = entry->models.find(dtype);
      if (model != entry->models.end()) return model->second;
    }
  }

  if (fetch) {
    absl::StatusOr<std::shared_ptr<const PerformerModel>> model;
    try {
      const bool with_base = base_model != nullptr;
      model = Fetch(job_id, version, deadline, base_version, std::move(base_model));
      if (with_base && absl::IsDataLoss(model.status())) {
        // The difference did not rebuild the coordinator's parameters: take them whole.
        base::LogWarning(model.status().message(), "; fetching the whole parameters");
        model = Fetch(job_id, version, deadline, 0, nullptr);
      }
    } catch (const std::exception& e) {
      // LibTorch allocation failures (c10::Error) and std::bad_alloc: the entry must still finish,
      // or every later Get of this version would wait forever.
      const std::string what = e.what();
      model =
          absl::StrContains(what, "alloc") || absl::StrContains(what, "memory")
              ? absl::ResourceExhaustedError(
                    absl::StrCat("fetching job ", job_id, " version ", version, ": out of memory: ", what))
              : absl::InternalError(absl::StrCat("fetching job ", job_id, " version ", version, ": ", what));
    }
    absl::MutexLock lock(&mu_);
    entry->done = true;
    if (model.ok()) {
      entry->dtype = (*model)->dtype();
      entry->models.emplace(entry->dtype, *model);
      KeepLatest(job_id);
    } else {
      entry->status = model.status();
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second == entry) entries_.erase(it);
    }
    fetched_.SignalAll();
    if (!model.ok()) return model.status();
    if (entry->dtype == dtype) return *model;
  }

  // Another dtype than the manifest's: convert the fetched model once.
  std::shared_ptr<const PerformerModel> fetched;
  {
    absl::MutexLock lock(&mu_);
    auto found = entry->models.find(dtype);
    if (found != entry->models.end()) return found->second;
    fetched = entry->models.at(entry->dtype);
  }
  absl::StatusOr<PerformerModel> converted =
      PerformerModel::FromTensors(fetched->config(), fetched->StateDict(), dtype, fetched->device());
  if (!converted.ok()) {
    return absl::InternalError(absl::StrCat("converting the parameters of job ", job_id, " version ", version,
                                            " to ", performer::DTypeName(dtype), ": ",
                                            converted.status().message()));
  }
  auto model = std::make_shared<const PerformerModel>(*std::move(converted));
  absl::MutexLock lock(&mu_);
  return entry->models.emplace(dtype, model).first->second;
}

void ParameterCache::KeepLatest(const std::string& job_id) {
  uint64_t latest = 0;
  bool any = false;
  for (auto it = entries_.lower_bound(Key(job_id, 0)); it != entries_.end() && it->first.first == job_id;
       ++it) {
    if (it->second->done) {
      latest = it->first.second;  // keys are ordered by version
      any = true;
    }
  }
  if (!any) return;
  for (auto it = entries_.lower_bound(Key(job_id, 0)); it != entries_.end() && it->first.first == job_id;) {
    if (it->second->done && it->first.second < latest) {
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t ParameterCache::BytesOfOtherJobs(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  int64_t bytes = 0;
  for (const auto& [key, entry] : entries_) {
    if (key.first == job_id || !entry->done) continue;
    for (const auto& [dtype, model] : entry->models) bytes += model->parameter_bytes();
  }
  return bytes;
}

// Job ids are never empty (the protocol requires 1 or more bytes), so "" excludes no job.
int64_t ParameterCache::Bytes() const { return BytesOfOtherJobs(""); }

void ParameterCache::DropOtherJobs(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->first.first != job_id && it->second->done ? entries_.erase(it) : std::next(it);
  }
}

void ParameterCache::Clear() {
  absl::MutexLock lock(&mu_);
  // Entries being fetched stay (their fetchers finish them); every finished one goes.
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->second->done ? entries_.erase(it) : std::next(it);
  }
}

void ParameterCache::Drop(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.lower_bound(Key(job_id, 0)); it != entries_.end() && it->first.first == job_id;) {
    it = entries_.erase(it);
  }
}

std::map<std::string, uint64_t> ParameterCache::CachedVersions() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, uint64_t> versions;
  for (const auto& [key, entry] : entries_) {
    if (entry->done && entry->status.ok()) versions[key.first] = key.second;  // the last is the newest
  }
  return versions;
}

}  // namespace slimfit::worker
