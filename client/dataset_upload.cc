#include "client/dataset_upload.h"

#include <cerrno>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"

namespace slimfit::client {
namespace {

// The file's base name, cut to LIMIT_MAX_NAME_BYTES on a UTF-8 character boundary.
std::string UploadName(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.size() > v1::LIMIT_MAX_NAME_BYTES) {
    size_t cut = v1::LIMIT_MAX_NAME_BYTES;
    while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
    name.resize(cut);
  }
  return name;
}

absl::Status CannotRead(const std::string& path, int error_number) {
  return absl::ErrnoToStatus(error_number, absl::StrCat(path, ": cannot read"));
}

}  // namespace

absl::StatusOr<UploadSource> DatasetSource(const std::string& path, absl::string_view data_type,
                                           absl::string_view separator) {
  absl::StatusOr<rpc::DatasetFormat> format = rpc::ParseDatasetFormat(data_type, separator);
  if (!format.ok()) return format.status();
  UploadSource source;
  source.path = path;
  source.content_type = format->content_type;
  source.token_encoding = format->encoding;
  source.document_separator = format->separator;
  return source;
}

absl::StatusOr<UploadSource> CheckpointSource(const std::string& path) {
  UploadSource source;
  source.path = path;
  const std::string lower = absl::AsciiStrToLower(path);
  if (absl::EndsWith(lower, ".safetensors")) {
    source.content_type = kSafetensorsContentType;
  } else if (absl::EndsWith(lower, ".pt") || absl::EndsWith(lower, ".pth")) {
    source.content_type = kPytorchContentType;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--init=", path, ": expected a .safetensors checkpoint or a .pt/.pth torch.save of a state dict"));
  }
  return source;
}

absl::StatusOr<v1::DatasetInfo> UploadFile(const CoordinatorClient& client, const UploadSource& source) {
  absl::StatusOr<std::string> sha256 = base::Sha256OfFile(source.path);
  if (!sha256.ok()) return sha256.status();
  std::ifstream probe(source.path, std::ios::binary | std::ios::ate);
  if (!probe) return CannotRead(source.path, errno);
  const int64_t total_bytes = static_cast<int64_t>(probe.tellg());
  probe.close();
  if (total_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(source.path, ": the file is empty; nothing to upload"));
  }

  v1::UploadDatasetRequest first;
  v1::UploadMetadata& metadata = *first.mutable_metadata();
  metadata.set_name(UploadName(source.path));
  metadata.set_content_type(source.content_type);
  metadata.set_total_bytes(total_bytes);
  metadata.set_sha256(*sha256);
  metadata.set_token_encoding(source.token_encoding);
  if (source.document_separator.has_value()) metadata.set_document_separator(*source.document_separator);

  // An error of ours (reading the file) inside an attempt: the call is cancelled and this returned.
  absl::Status local_error;
  v1::DatasetInfo info;
  auto attempt = [&](grpc::ClientContext* context) {
    local_error = absl::OkStatus();
    info.Clear();
    std::unique_ptr<grpc::ClientWriterInterface<v1::UploadDatasetRequest>> writer =
        client.stub().UploadDataset(context, &info);
    std::ifstream file(source.path, std::ios::binary);
    if (!file) {
      local_error = CannotRead(source.path, errno);
      context->TryCancel();
      return writer->Finish();
    }
    bool writing = writer->Write(first);
    std::vector<char> buffer(v1::LIMIT_MAX_CHUNK_BYTES);
    int64_t sent = 0;
    v1::UploadDatasetRequest chunk;
    while (writing && sent < total_bytes) {
      file.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const std::streamsize got = file.gcount();
      if (got <= 0) break;
      chunk.set_chunk(buffer.data(), static_cast<size_t>(got));
      writing = writer->Write(chunk);
      sent += got;
    }
    if (writing) {
      // Every byte written: the file must have held exactly total_bytes (no more, no less).
      if (sent != total_bytes || file.peek() != std::ifstream::traits_type::eof()) {
        local_error = absl::FailedPreconditionError(absl::StrCat(
            source.path, ": the file changed while it was uploaded (", total_bytes, " bytes when hashed)"));
        context->TryCancel();
      }
      writer->WritesDone();
    }
    // A failed write means the coordinator has answered (or the call broke): its status says which.
    return writer->Finish();
  };
  const absl::Duration per_mib = absl::Seconds(static_cast<double>(total_bytes) / (1 << 20));
  absl::Status status = client.Call("UploadDataset", Idempotency::kIdempotent, attempt, per_mib);
  if (!local_error.ok()) return local_error;
  if (!status.ok())
    return absl::Status(status.code(), absl::StrCat("uploading ", source.path, ": ", status.message()));
  return info;
}

}  // namespace slimfit::client
