#include "server/upload_store.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/log.h"
#include "base/sha256.h"
#include "data_formats/dataset_format.h"
#include "data_formats/token_codec.h"
#include "rpc/rpc_util.h"
#include "server/job_data.h"
#include "server/job_record.h"

namespace slimfit::server {
namespace {

// A failure of the coordinator's own disk while it stores an upload: the client can do nothing
// about it but try again later or tell the operator, so INTERNAL with the file system's message
// (ENOENT's NOT_FOUND would read as "your upload does not exist"). A full disk stays
// RESOURCE_EXHAUSTED.
absl::Status StorageError(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kResourceExhausted) return status;
  return absl::InternalError(absl::StrCat("storing the upload on the coordinator: ", status.message()));
}

std::string StoredPath(const std::string& uploads_dir, const std::string& id, const std::string& type) {
  std::string suffix;
  if (type == "application/x-safetensors") suffix = ".safetensors";
  if (type == "application/x-pytorch") suffix = ".pt";
  return absl::StrCat(uploads_dir, "/", id, suffix);
}

class FileUploadSink : public UploadSink {
 public:
  FileUploadSink(StateStore* store, v1::UploadMetadata metadata, std::string id, base::AtomicFileWriter file)
      : store_(store), metadata_(std::move(metadata)), id_(std::move(id)), file_(std::move(file)) {}

  absl::Status Write(const std::string& chunk) override {
    if (!file_.has_value()) return absl::FailedPreconditionError("the upload is finished or failed");
    if (chunk.empty() || chunk.size() > static_cast<size_t>(v1::LIMIT_MAX_CHUNK_BYTES)) {
      return absl::InvalidArgumentError(absl::StrCat("chunk of ", chunk.size(), " bytes; chunks hold 1..",
                                                     v1::LIMIT_MAX_CHUNK_BYTES, " bytes"));
    }
    received_ += static_cast<int64_t>(chunk.size());
    if (received_ > metadata_.total_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("received more than the declared total_bytes ", metadata_.total_bytes()));
    }
    hasher_.Update(chunk);
    if (absl::Status appended = file_->Append(chunk); !appended.ok()) {
      file_.reset();  // the temporary file goes; nothing more is written
      return StorageError(appended);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::DatasetInfo> Finish() override {
    if (!file_.has_value()) return absl::FailedPreconditionError("the upload is finished or failed");
    // Whatever happens below, the sink is spent: an uncommitted file is removed with the writer.
    std::optional<base::AtomicFileWriter> file = std::move(file_);
    file_.reset();
    if (received_ != metadata_.total_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("received ", received_, " bytes; metadata.total_bytes is ", metadata_.total_bytes()));
    }
    const std::string digest = hasher_.FinishHex();
    if (digest != metadata_.sha256()) {
      return absl::DataLossError(absl::StrCat("SHA-256 of the received bytes is ", digest,
                                              "; metadata.sha256 is ", metadata_.sha256()));
    }
    DatasetRecord record;
    record.info.set_dataset_id(id_);
    record.info.set_name(metadata_.name());
    record.info.set_content_type(metadata_.content_type());
    record.info.set_total_bytes(received_);
    record.info.set_sha256(digest);
    *record.info.mutable_created_at() = NowTimestamp();
    record.token_encoding = metadata_.token_encoding();
    if (metadata_.has_document_separator()) record.document_separator = metadata_.document_separator();
    record.path = file->path();
    // Durable before it is acknowledged: the bytes, the rename and the directory entry
    // (AtomicFileWriter checks each). The stored path is content-addressed, so a concurrent upload
    // of the same bytes renames identical contents over it.
    if (absl::Status committed = file->Commit(); !committed.ok()) return StorageError(committed);
    if (IsDatasetType(metadata_.content_type())) {
      absl::Status parsed = ParseDatasetInto(&record);
      if (!parsed.ok()) {
        std::remove(record.path.c_str());  // never recorded: a file nothing refers to
        return parsed;
      }
    }
    if (absl::Status stored = store_->PutDataset(record); !stored.ok()) return stored;
    base::LogInfo("stored upload ", id_, " (", metadata_.name(), ", ", received_, " bytes, ",
                  record.info.tokens(), " tokens)");
    return record.info;
  }

 private:
  // The dataset's tokens and documents into record->info; the format's errors.
  absl::Status ParseDatasetInto(DatasetRecord* record) const {
    absl::StatusOr<std::string> bytes = base::ReadFileToString(record->path);
    if (!bytes.ok()) return StorageError(bytes.status());
    absl::StatusOr<rpc::TokenStream> stream = rpc::ParseDataset(
        *bytes, metadata_.content_type(), metadata_.token_encoding(), record->document_separator);
    if (!stream.ok()) return stream.status();
    if (stream->tokens.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset holds ", stream->tokens.size(), " tokens; at least 2 are needed"));
    }
    record->info.set_tokens(static_cast<int64_t>(stream->tokens.size()));
    record->info.set_documents(static_cast<int64_t>(stream->doc_starts.size()));
    return absl::OkStatus();
  }

  StateStore* const store_;
  const v1::UploadMetadata metadata_;
  const std::string id_;
  std::optional<base::AtomicFileWriter> file_;  // empty once finished or failed
  base::Sha256Hasher hasher_;
  int64_t received_ = 0;
};

}  // namespace

bool IsDatasetType(const std::string& type) {
  return type == "text/plain" || type == "application/x-slimfit-tokens";
}

bool IsCheckpointType(const std::string& type) {
  return type == "application/x-safetensors" || type == "application/x-pytorch";
}

absl::StatusOr<std::unique_ptr<UploadSink>> UploadStore::BeginUpload(
    const v1::UploadMetadata& metadata, std::optional<v1::DatasetInfo>* existing) {
  if (metadata.name().empty() || metadata.name().size() > static_cast<size_t>(v1::LIMIT_MAX_NAME_BYTES)) {
    return rpc::InvalidFieldError("metadata.name", "must be 1..256 bytes");
  }
  const std::string& type = metadata.content_type();
  if (!IsDatasetType(type) && !IsCheckpointType(type)) {
    return rpc::InvalidFieldError("metadata.content_type",
                                  absl::StrCat("\"", type,
                                               "\" is not text/plain, application/x-slimfit-tokens, "
                                               "application/x-safetensors or application/x-pytorch"));
  }
  if (metadata.total_bytes() < 1) return rpc::InvalidFieldError("metadata.total_bytes", "must be ≥ 1");
  if (metadata.total_bytes() > limit_bytes_) {
    v1::ErrorDetail detail;
    detail.set_limit_bytes(limit_bytes_);
    return rpc::AttachErrorDetail(absl::ResourceExhaustedError(absl::StrCat(
                                      "upload of ", metadata.total_bytes(),
                                      " bytes is above the coordinator's limit of ", limit_bytes_, " bytes")),
                                  detail);
  }
  if (!base::IsSha256Hex(metadata.sha256())) {
    return rpc::InvalidFieldError("metadata.sha256", "must be 64 lowercase hexadecimal characters");
  }
  if (type == "application/x-slimfit-tokens") {
    if (rpc::TokenWidth(metadata.token_encoding()) == 0) {
      return rpc::InvalidFieldError("metadata.token_encoding", "required for application/x-slimfit-tokens");
    }
  } else if (metadata.token_encoding() != v1::TOKEN_ENCODING_UNSPECIFIED) {
    return rpc::InvalidFieldError("metadata.token_encoding", absl::StrCat("must be UNSPECIFIED for ", type));
  }
  if (metadata.has_document_separator()) {
    if (!IsDatasetType(type))
      return rpc::InvalidFieldError("metadata.document_separator", "only for datasets");
    if (metadata.document_separator().empty() || metadata.document_separator().size() > 64) {
      return rpc::InvalidFieldError("metadata.document_separator", "must be 1..64 bytes");
    }
  }
  // Content-addressed: the same bytes, type and separator give the same id.
  const std::string key =
      absl::StrCat(type, "|", metadata.sha256(), "|", metadata.token_encoding(), "|",
                   metadata.has_document_separator() ? metadata.document_separator() : "");
  const std::string id =
      absl::StrCat(IsDatasetType(type) ? "ds-" : "ck-", base::Sha256Hex(key).substr(0, 16));
  absl::StatusOr<std::optional<DatasetRecord>> stored = store_->GetDataset(id);
  if (!stored.ok()) return stored.status();
  if (stored->has_value()) {
    v1::DatasetInfo info = (*stored)->info;
    info.set_already_existed(true);
    *existing = info;
    return std::unique_ptr<UploadSink>();
  }
  absl::StatusOr<base::AtomicFileWriter> file =
      base::AtomicFileWriter::Create(StoredPath(uploads_dir_, id, type));
  if (!file.ok()) return StorageError(file.status());
  return std::unique_ptr<UploadSink>(new FileUploadSink(store_, metadata, id, *std::move(file)));
}

}  // namespace slimfit::server
