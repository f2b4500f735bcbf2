// The datasets a worker holds on its own storage (slimfit-worker --data NAME=PATH[,NAME=PATH...]):
// each file is read once at start-up as an upload would be (--data_type, --data_separator:
// rpc::ParseDatasetFormat and rpc::ParseDataset), counted and hashed, and described to the
// coordinator at registration (v1::LocalDataset: name, tokens, documents, SHA-256, format, largest
// token id). The bytes never leave the worker; nothing of them is kept in memory after the check,
// only the path and the digest, so a job can read the file again and find it unchanged.
//
// Example:
//   absl::StatusOr<std::vector<LocalDataSpec>> specs = ParseLocalDataFlag("notes=/data/notes.txt");
//   absl::StatusOr<rpc::DatasetFormat> format = rpc::ParseDatasetFormat("text", "\\n\\n");
//   absl::StatusOr<LocalDatasets> datasets = LocalDatasets::Load(*specs, *format);
//   request.mutable_local_datasets()->Add(...datasets->announcements()...);
//
// Thread safety: immutable after Load; safe to share.
#ifndef SLIMFIT_WORKER_LOCAL_DATASETS_H_
#define SLIMFIT_WORKER_LOCAL_DATASETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data_formats/dataset_format.h"
#include "proto/slimfit.pb.h"

namespace slimfit::worker {

// One NAME=PATH of --data.
struct LocalDataSpec {
  std::string name;
  std::string path;
};

// "NAME=PATH[,NAME=PATH...]" → specs, in order. INVALID_ARGUMENT naming --data for an entry without
// '=', an empty path, a name that is empty, longer than LIMIT_MAX_NAME_BYTES or not of
// [A-Za-z0-9._-], a name given twice, or more than LIMIT_MAX_LOCAL_DATASETS entries. An empty value
// is no datasets.
absl::StatusOr<std::vector<LocalDataSpec>> ParseLocalDataFlag(absl::string_view value);

class LocalDatasets {
 public:
  LocalDatasets() = default;  // none

  // Reads, parses and hashes every file. Errors name the dataset and its path: the file's errno
  // status when it cannot be read; INVALID_ARGUMENT when it holds no tokens (empty, or only
  // separators) or does not parse in `format` (e.g. a token file that is not whole tokens).
  static absl::StatusOr<LocalDatasets> Load(const std::vector<LocalDataSpec>& specs,
                                            const rpc::DatasetFormat& format);

  // What the worker announces, in --data order.
  const std::vector<v1::LocalDataset>& announcements() const { return announcements_; }
  // The file a dataset was read from; empty when the worker holds no dataset of that name.
  std::string PathOf(absl::string_view name) const;
  // The announcement of the dataset with this SHA-256; nullptr when the worker holds none.
  const v1::LocalDataset* Find(absl::string_view sha256) const;

  // The dataset with this SHA-256 read again and parsed: FAILED_PRECONDITION when the worker holds
  // none, or when the file cannot be read or no longer has the announced digest (it changed since
  // the worker started: restart the worker to announce the new contents).
  absl::StatusOr<rpc::TokenStream> Read(absl::string_view sha256) const;

 private:
  std::vector<v1::LocalDataset> announcements_;
  std::vector<std::string> paths_;
  rpc::DatasetFormat format_;
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_LOCAL_DATASETS_H_
