// Uploads on the coordinator: datasets (text, token files) and checkpoints (safetensors, torch.save)
// stored content-addressed under <state_dir>/uploads. BeginUpload validates the metadata and either
// finds the same upload stored already (same bytes, type and separator: the same id) or opens a sink
// that writes the bytes to a temporary file beside their content-addressed path (base::
// AtomicFileWriter) while hashing them; Finish checks size and SHA-256, makes the file durable
// (fsync, rename, directory fsync: every step's error checked), parses a dataset and records it in
// the StateStore before anything is acknowledged. An upload that fails or is abandoned leaves no
// file and no record behind: the client uploads it again from the start.
//
// Errors of the coordinator's own disk (the uploads directory gone, not a directory, an I/O
// error) are INTERNAL naming the path; a full disk is RESOURCE_EXHAUSTED.
//
// Thread safety: UploadStore is thread-safe; one UploadSink is used by one thread.
#ifndef SLIMFIT_SERVER_UPLOAD_STORE_H_
#define SLIMFIT_SERVER_UPLOAD_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/slimfit.pb.h"
#include "server/state_store.h"

namespace slimfit::server {

// text/plain or application/x-slimfit-tokens.
bool IsDatasetType(const std::string& content_type);
// application/x-safetensors or application/x-pytorch.
bool IsCheckpointType(const std::string& content_type);

// An upload in progress: bytes go to a temporary file while they are hashed. Destroying an
// unfinished sink removes the temporary file.
class UploadSink {
 public:
  virtual ~UploadSink() = default;
  // INVALID_ARGUMENT for an empty or oversized chunk or more bytes than declared; RESOURCE_EXHAUSTED
  // when the disk is full, INTERNAL for another disk error (the sink is then spent:
  // FAILED_PRECONDITION for every later call).
  virtual absl::Status Write(const std::string& chunk) = 0;
  // Verifies size (INVALID_ARGUMENT) and SHA-256 (DATA_LOSS), stores the file (content-addressed;
  // disk errors as Write's), parses a dataset (its errors) and records it; returns what was stored.
  // Called once: the sink is spent afterwards, whatever the outcome.
  virtual absl::StatusOr<v1::DatasetInfo> Finish() = 0;
};

class UploadStore {
 public:
  // `store` is not owned and must outlive this; `uploads_dir` exists.
  UploadStore(StateStore* store, std::string uploads_dir, int64_t limit_bytes)
      : store_(store), uploads_dir_(std::move(uploads_dir)), limit_bytes_(limit_bytes) {}

  // INVALID_ARGUMENT naming the metadata field at fault; RESOURCE_EXHAUSTED (ErrorDetail.limit_bytes)
  // above the limit; INTERNAL when the temporary file cannot be created (the uploads directory is
  // gone or not a directory). A stored upload with the same digest, type and separator is
  // returned in `*existing` (already_existed set) with a null sink.
  absl::StatusOr<std::unique_ptr<UploadSink>> BeginUpload(const v1::UploadMetadata& metadata,
                                                          std::optional<v1::DatasetInfo>* existing);

 private:
  StateStore* const store_;
  const std::string uploads_dir_;
  const int64_t limit_bytes_;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_UPLOAD_STORE_H_
