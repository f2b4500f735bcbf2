// The uploads the coordinator-side fuzz targets (job_spec, coordinator_requests) start from, so
// that fuzzed job specs can name real datasets and checkpoints: two text datasets (with and
// without a separator), a token dataset and a tiny model's safetensors checkpoint. Their ids are
// content-addressed, hence the same in every run; the seed corpora use them:
//   text  "ds-…" (text/plain, separator "\n\n")     plain  "ds-…" (text/plain, one document)
//   tokens "ds-…" (uint16 ids < 300, separator 0)   checkpoint "ck-…" (vocab 256, d_model 8, 1 layer)
// PrintSeedUploads lists the actual ids (when SLIMFIT_FUZZ_PRINT_SEEDS is set).
//
// Thread safety: call from one thread (fuzz initialisation).
#ifndef SLIMFIT_FUZZ_SERVICE_UPLOADS_H_
#define SLIMFIT_FUZZ_SERVICE_UPLOADS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/slimfit.pb.h"
#include "server/upload_store.h"

namespace slimfit::fuzz {

struct SeedUploads {
  std::string text_dataset_id;
  std::string plain_dataset_id;
  std::string tokens_dataset_id;
  std::string checkpoint_id;
  std::string checkpoint_path;  // the stored file
};

// UploadStore::BeginUpload or Coordinator::BeginUpload.
using BeginUploadFunction = std::function<absl::StatusOr<std::unique_ptr<server::UploadSink>>(
    const v1::UploadMetadata&, std::optional<v1::DatasetInfo>*)>;

// Uploads the seeds through `begin` (aborting on any failure: the fixture is broken, not the
// code under test). `uploads_dir` is where the store keeps uploads.
SeedUploads UploadSeeds(const BeginUploadFunction& begin, const std::string& uploads_dir);

// Prints the ids to stderr once per process when $SLIMFIT_FUZZ_PRINT_SEEDS is set (for writing
// seeds by hand).
void PrintSeedUploads(const SeedUploads& uploads);

}  // namespace slimfit::fuzz

#endif  // SLIMFIT_FUZZ_SERVICE_UPLOADS_H_
