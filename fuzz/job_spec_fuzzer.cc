// Fuzz target: job specs — the text-format slimfit.v1.JobSpec `slimfit submit JOB.textproto` reads
// (client/submit_command.h ReadJobSpec) and the coordinator's validation and preparation of the
// spec it receives (server/job_defaults.h WithJobDefaults, server/job_preparer.h JobPreparer::Prepare): the
// spec's fields, the model (fresh, or an uploaded or earlier job's checkpoint), the datasets and the job data
// cut from them.
//
// The preparer works on a state store holding the seed uploads (service_uploads.h) and a
// checkpoint of round 10 of job "job-000001". Invariants:
//   - ReadJobSpec refuses with INVALID_ARGUMENT "PATH:..."; an accepted spec can be sent (it
//     serialises to bytes the coordinator parses) and, printed as text, reads back equal;
//   - WithJobDefaults is idempotent;
//   - Prepare refuses with INVALID_ARGUMENT naming a "spec." field, NOT_FOUND, RESOURCE_EXHAUSTED
//     (a model above the coordinator's limit) or FAILED_PRECONDITION, or returns a valid model and job data
//     with at least one training sequence of the spec's length.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "client/submit_command.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/service_uploads.h"
#include "google/protobuf/text_format.h"
#include "server/job_defaults.h"
#include "server/job_preparer.h"
#include "server/state_store.h"
#include "server/upload_store.h"

namespace slimfit::fuzz {
namespace {

struct Coordinator {
  std::unique_ptr<server::StateStore> store;
  std::unique_ptr<server::UploadStore> uploads;
  std::unique_ptr<server::JobPreparer> preparer;
};

Coordinator& State() {
  static Coordinator* state = [] {
    auto* s = new Coordinator();
    const std::string uploads_dir = ScratchPath("uploads");
    std::filesystem::create_directories(uploads_dir);
    absl::StatusOr<std::unique_ptr<server::StateStore>> store =
        server::StateStore::Open(ScratchPath("state.db"));
    SLIMFIT_FUZZ_CHECK(store.ok(), store.status().ToString());
    s->store = *std::move(store);
    s->uploads = std::make_unique<server::UploadStore>(s->store.get(), uploads_dir, int64_t{1} << 30);
    const SeedUploads seeds = UploadSeeds(
        [&](const v1::UploadMetadata& metadata, std::optional<v1::DatasetInfo>* existing) {
          return s->uploads->BeginUpload(metadata, existing);
        },
        uploads_dir);
    PrintSeedUploads(seeds);
    server::CheckpointRecord checkpoint;
    checkpoint.job_id = "job-000001";
    checkpoint.round = 10;
    checkpoint.parameter_version = 11;
    checkpoint.model_path = seeds.checkpoint_path;
    const absl::Status put = s->store->PutCheckpoint(checkpoint);
    SLIMFIT_FUZZ_CHECK(put.ok(), put.ToString());
    // Prepare reads neither the registry nor the margin (CheckSomeWorkerFits does).
    s->preparer = std::make_unique<server::JobPreparer>(s->store.get(), nullptr, 0.1);
    return s;
  }();
  return *state;
}

}  // namespace
}  // namespace slimfit::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)slimfit::fuzz::State();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace slimfit;  // NOLINT
  const std::string path =
      fuzz::WriteScratchFile("job.textproto", absl::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<v1::JobSpec> spec = client::ReadJobSpec(path);
  if (!spec.ok()) {
    SLIMFIT_FUZZ_CHECK(
        absl::IsInvalidArgument(spec.status()) && absl::StartsWith(spec.status().message(), path + ":"),
        spec.status().ToString());
    return 0;
  }
  // What `slimfit submit` sends, the coordinator can parse (proto3 refuses strings that are not UTF-8).
  const std::string wire = spec->SerializeAsString();
  v1::JobSpec received;
  SLIMFIT_FUZZ_CHECK(received.ParseFromString(wire),
                     "an accepted spec cannot be sent: the coordinator cannot parse it");
  std::string printed;
  SLIMFIT_FUZZ_CHECK(google::protobuf::TextFormat::PrintToString(*spec, &printed), "cannot print the spec");
  absl::StatusOr<v1::JobSpec> reread =
      client::ReadJobSpec(fuzz::WriteScratchFile("printed.textproto", printed));
  // Compared as bytes: a NaN field is not equal to itself.
  SLIMFIT_FUZZ_CHECK(reread.ok() && reread->SerializeAsString() == wire, "printed spec reads differently:\n",
                     printed);

  const v1::JobSpec with_defaults = server::WithJobDefaults(*spec);
  SLIMFIT_FUZZ_CHECK(
      server::WithJobDefaults(with_defaults).SerializeAsString() == with_defaults.SerializeAsString(),
      "WithJobDefaults is not idempotent");
  absl::StatusOr<server::PreparedJob> prepared =
      fuzz::State().preparer->Prepare(with_defaults, /*load_initial=*/false);
  if (!prepared.ok()) {
    const absl::Status& s = prepared.status();
    SLIMFIT_FUZZ_CHECK((absl::IsInvalidArgument(s) && absl::StartsWith(s.message(), "spec.")) ||
                           absl::IsNotFound(s) || absl::IsResourceExhausted(s) ||
                           absl::IsFailedPrecondition(s),
                       s.ToString());
    return 0;
  }
  SLIMFIT_FUZZ_CHECK(prepared->config.Validate().ok(), prepared->config.DebugString());
  SLIMFIT_FUZZ_CHECK(prepared->data.has_value() && prepared->data->training_sequences() >= 1 &&
                         prepared->data->sequence_length() == with_defaults.sequence_length(),
                     "job data");
  return 0;
}
