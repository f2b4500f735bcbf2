// What the coordinator knows of the datasets that stay on workers (JobSpec.local_datasets): which
// digest a name stands for, and how each dataset falls into sequences of L tokens — the documents
// in every sequence, which the loss normaliser, the shard cuts and the memory plans need. Never a
// token: a layout comes from a live holder (Worker.DescribeLocalData, page by page) and is kept in
// the state store by (digest, L), so a coordinator restart needs no holder to resume the job.
//
// Example:
//   LocalDataLayouts layouts(store, registry);
//   absl::StatusOr<std::vector<std::string>> digests = layouts.Resolve(spec.local_datasets());
//   absl::StatusOr<LocalSource> source = layouts.Source(digests->front(), 512, vocab, 0);
//
// Thread safety: thread-safe (the store and registry are). Pointers not owned; they must outlive
// this object.
#ifndef SLIMFIT_SERVER_LOCAL_DATA_LAYOUTS_H_
#define SLIMFIT_SERVER_LOCAL_DATA_LAYOUTS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/repeated_field.h"
#include "server/job_data.h"
#include "server/state_store.h"
#include "server/worker_registry.h"

namespace slimfit::server {

class LocalDataLayouts {
 public:
  LocalDataLayouts(StateStore* store, WorkerRegistry* registry,
                   absl::Duration call_timeout = absl::Seconds(60))
      : store_(store), registry_(registry), call_timeout_(call_timeout) {}

  // Each entry of JobSpec.local_datasets as a digest: a SHA-256 stays as it is; a name becomes the
  // digest a registered worker (live or not) announced under it. INVALID_ARGUMENT naming
  // "spec.local_datasets[i]" for an entry no registered worker announced, a name announced with
  // different digests, a digest given twice, or more than LIMIT_MAX_LOCAL_DATASETS entries.
  absl::StatusOr<std::vector<std::string>> Resolve(
      const google::protobuf::RepeatedPtrField<std::string>& entries) const;

  // The dataset `sha256` (entry `index` of the spec) at L = sequence_length: its layout from the
  // store (no holder needed: a restarted coordinator resumes its jobs before workers return), or
  // from a live holder (then stored). INVALID_ARGUMENT naming the entry when its announced largest
  // token id is not below `vocab`; FAILED_PRECONDITION when the layout is not stored and no
  // registered worker announced the dataset, or none of its holders is live; a holder's error (with
  // its id) otherwise.
  absl::StatusOr<LocalSource> Source(const std::string& sha256, int64_t sequence_length, int64_t vocab,
                                     int index) const;

  // Source without the vocabulary check: the layout stored, asked of a live holder when it is not.
  absl::Status Fetch(const std::string& sha256, int64_t sequence_length, int index) const {
    return Source(sha256, sequence_length, std::numeric_limits<int64_t>::max(), index).status();
  }

 private:
  // A live holder's answer, all pages, checked (sequences = floor(tokens / L), documents ≥ 1 and
  // ≤ L each).
  absl::StatusOr<v1::LocalDataLayout> Ask(const WorkerHandle& holder, const v1::LocalDataset& announced,
                                          int64_t sequence_length) const;

  StateStore* const store_;
  WorkerRegistry* const registry_;
  const absl::Duration call_timeout_;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_LOCAL_DATA_LAYOUTS_H_
