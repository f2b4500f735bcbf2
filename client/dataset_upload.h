// Uploading a file to the coordinator with Coordinator.UploadDataset (docs/PROTOCOL.md, "Job
// submission"): a dataset for `slimfit submit --data`, or an initial checkpoint for --init.
//
// The stream is the UploadMetadata {name = the file's base name, content_type, total_bytes,
// sha256, token_encoding, document_separator}, then the file in chunks of at most
// v1::LIMIT_MAX_CHUNK_BYTES (1 MiB), in order. The file is read twice: once for its SHA-256, once
// to send it. Uploads are content-addressed, so a call that fails with UNAVAILABLE is sent again
// (CoordinatorClient::Call); when the coordinator answers before all chunks are written (it
// already holds these bytes), writing stops and its answer is taken.
//
// Thread safety: pure functions apart from reading the file and calling the coordinator.
#ifndef SLIMFIT_CLIENT_DATASET_UPLOAD_H_
#define SLIMFIT_CLIENT_DATASET_UPLOAD_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/coordinator_client.h"
#include "data_formats/dataset_format.h"
#include "proto/slimfit.pb.h"

namespace slimfit::client {

using rpc::kTextContentType;
using rpc::kTokensContentType;
inline constexpr char kSafetensorsContentType[] = "application/x-safetensors";
inline constexpr char kPytorchContentType[] = "application/x-pytorch";

struct UploadSource {
  std::string path;
  std::string content_type;
  v1::TokenEncoding token_encoding = v1::TOKEN_ENCODING_UNSPECIFIED;  // token files only
  std::optional<std::string> document_separator;                      // datasets only
};

// A dataset read as rpc::ParseDatasetFormat(data_type, separator) says (--data_type, --separator).
absl::StatusOr<UploadSource> DatasetSource(const std::string& path, absl::string_view data_type,
                                           absl::string_view separator);

// A checkpoint, by extension: ".safetensors" → application/x-safetensors; ".pt", ".pth" →
// application/x-pytorch (a torch.save of a plain state dict). INVALID_ARGUMENT naming --init for
// anything else.
absl::StatusOr<UploadSource> CheckpointSource(const std::string& path);

// Uploads `source` and returns the coordinator's DatasetInfo. Errors: NOT_FOUND (or the errno's
// code) naming the path when the file cannot be read; INVALID_ARGUMENT for an empty file;
// FAILED_PRECONDITION when the file changes size while it is sent; the coordinator's status
// otherwise (INVALID_ARGUMENT, DATA_LOSS, RESOURCE_EXHAUSTED, ...; CoordinatorClient::Convert).
// The deadline is --timeout plus one second per MiB.
absl::StatusOr<v1::DatasetInfo> UploadFile(const CoordinatorClient& client, const UploadSource& source);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_DATASET_UPLOAD_H_
