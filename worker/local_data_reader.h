// Serves the coordinator's requests over the datasets a worker holds (JobSpec.local_datasets):
// how one falls into sequences of L tokens (Worker.DescribeLocalData: the documents in each
// sequence, a page at a time) and the tokens of a shard's sequences (ComputeGradientRequest.
// local_data), read on the worker — the coordinator never sees them.
//
// A dataset is read from its file, checked against the digest it was announced with and parsed on
// first use, and kept parsed while requests name it; one dataset at a time (the last one used), so
// a worker holding many large files keeps one in memory.
//
// Thread safety: thread-safe. `datasets` is not owned and must outlive the reader.
#ifndef SLIMFIT_WORKER_LOCAL_DATA_READER_H_
#define SLIMFIT_WORKER_LOCAL_DATA_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "data_formats/dataset_format.h"
#include "proto/slimfit.pb.h"
#include "worker/local_datasets.h"

namespace slimfit::worker {

class LocalDataReader {
 public:
  explicit LocalDataReader(const LocalDatasets* datasets) : datasets_(datasets) {}

  // One page of the layout. INVALID_ARGUMENT naming the field for a malformed digest, L < 2 or
  // above LIMIT_MAX_CHUNK_BYTES, or a first_sequence outside [0, sequences] (sequences =
  // floor(tokens / L)); FAILED_PRECONDITION as LocalDatasets::Read.
  absl::StatusOr<v1::LocalDataLayout> Describe(const v1::DescribeLocalDataRequest& request);

  // The tokens of `shard`'s sequences concatenated, and the document starts within them (offsets
  // into the concatenation, every sequence start included) — what ComputeGradientRequest.tokens and
  // doc_starts would carry. INVALID_ARGUMENT ("local_data.sequences: ...") for an index outside
  // [0, floor(tokens / L)) or more than LIMIT_MAX_SHARD_DOC_STARTS document starts;
  // FAILED_PRECONDITION as LocalDatasets::Read.
  struct Sequences {
    std::vector<int64_t> tokens;
    std::vector<int64_t> doc_starts;
  };
  absl::StatusOr<Sequences> Read(const v1::LocalDataShard& shard, int64_t sequence_length);

 private:
  absl::StatusOr<std::shared_ptr<const rpc::TokenStream>> Stream(const std::string& sha256);

  const LocalDatasets* const datasets_;
  absl::Mutex mu_;
  std::string cached_sha256_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const rpc::TokenStream> cached_ ABSL_GUARDED_BY(mu_);
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_LOCAL_DATA_READER_H_
