#include "server/upload_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/sha256.h"
#include "proto/dataset_format.h"
#include "proto/rpc_util.h"
#include "proto/token_codec.h"
#include "server/job_data.h"
#include "server/job_record.h"

namespace slimfit::server {
namespace {

namespace fs = std::filesystem;

class FileUploadSink : public UploadSink {
 public:
  FileUploadSink(StateStore* store, std::string uploads_dir, v1::UploadMetadata metadata, std::string id)
      : store_(store),
        uploads_dir_(std::move(uploads_dir)),
        metadata_(std::move(metadata)),
        id_(std::move(id)) {
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
      return absl::InvalidArgumentError(absl::StrCat("chunk of ", chunk.size(), " bytes; chunks hold 1..",
                                                     v1::LIMIT_MAX_CHUNK_BYTES, " bytes"));
    }
    received_ += static_cast<int64_t>(chunk.size());
    if (received_ > metadata_.total_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("received more than the declared total_bytes ", metadata_.total_bytes()));
    }
    hasher_.Update(chunk);
    out_.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (!out_)
      return absl::ResourceExhaustedError(
          absl::StrCat("writing the upload failed (disk full?) after ", received_, " bytes"));
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
    std::string suffix;
    if (metadata_.content_type() == "application/x-safetensors") suffix = ".safetensors";
    if (metadata_.content_type() == "application/x-pytorch") suffix = ".pt";
    record.path = absl::StrCat(uploads_dir_, "/", id_, suffix);
    if (IsDatasetType(metadata_.content_type())) {
      std::ifstream in(temp_path_, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      absl::StatusOr<rpc::TokenStream> stream = rpc::ParseDataset(
          bytes, metadata_.content_type(), metadata_.token_encoding(), record.document_separator);
      if (!stream.ok()) return stream.status();
      if (stream->tokens.size() < 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("dataset holds ", stream->tokens.size(), " tokens; at least 2 are needed"));
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
    if (error)
      return absl::InternalError(absl::StrCat("storing the upload at ", record.path, ": ", error.message()));
    if (absl::Status stored = store_->PutDataset(record); !stored.ok()) return stored;
    base::LogInfo("stored upload ", id_, " (", metadata_.name(), ", ", received_, " bytes, ",
                  record.info.tokens(), " tokens)");
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
  return std::unique_ptr<UploadSink>(new FileUploadSink(store_, uploads_dir_, metadata, id));
}

}  // namespace slimfit::server
