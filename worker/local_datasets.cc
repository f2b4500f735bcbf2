#include "worker/local_datasets.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/sha256.h"

namespace slimfit::worker {
namespace {

absl::Status BadEntry(absl::string_view entry, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--data: '", entry, "': ", why));
}

}  // namespace

absl::StatusOr<std::vector<LocalDataSpec>> ParseLocalDataFlag(absl::string_view value) {
  std::vector<LocalDataSpec> specs;
  if (value.empty()) return specs;
  std::set<std::string> names;
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    const size_t equals = entry.find('=');
    if (equals == absl::string_view::npos) return BadEntry(entry, "expected NAME=PATH");
    LocalDataSpec spec{std::string(entry.substr(0, equals)), std::string(entry.substr(equals + 1))};
    if (!rpc::IsLocalDatasetName(spec.name)) {
      return BadEntry(entry, absl::StrCat("a name is 1 to ", v1::LIMIT_MAX_NAME_BYTES,
                                          " letters, digits, '.', '_' and '-'"));
    }
    if (spec.path.empty()) return BadEntry(entry, "the path is empty");
    if (!names.insert(spec.name).second)
      return BadEntry(entry, absl::StrCat("the name ", spec.name, " is given twice"));
    specs.push_back(std::move(spec));
  }
  if (specs.size() > static_cast<size_t>(v1::LIMIT_MAX_LOCAL_DATASETS)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data: ", specs.size(), " datasets; a worker holds at most ", v1::LIMIT_MAX_LOCAL_DATASETS));
  }
  return specs;
}

absl::StatusOr<LocalDatasets> LocalDatasets::Load(const std::vector<LocalDataSpec>& specs,
                                                  const rpc::DatasetFormat& format) {
  LocalDatasets datasets;
  datasets.format_ = format;
  for (const LocalDataSpec& spec : specs) {
    const std::string what = absl::StrCat("local dataset ", spec.name, " (", spec.path, ")");
    absl::StatusOr<std::string> bytes = base::ReadFileToString(spec.path);
    if (!bytes.ok()) {
      return absl::Status(bytes.status().code(), absl::StrCat(what, ": ", bytes.status().message()));
    }
    absl::StatusOr<rpc::TokenStream> stream =
        rpc::ParseDataset(*bytes, format.content_type, format.encoding, format.separator);
    if (!stream.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", stream.status().message()));
    if (stream->tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": holds no tokens (empty, or only separators)"));
    }
    v1::LocalDataset announced;
    announced.set_name(spec.name);
    announced.set_tokens(static_cast<int64_t>(stream->tokens.size()));
    announced.set_documents(static_cast<int64_t>(stream->doc_starts.size()));
    announced.set_sha256(base::Sha256Hex(*bytes));
    announced.set_content_type(format.content_type);
    announced.set_token_encoding(format.encoding);
    announced.set_max_token(*std::max_element(stream->tokens.begin(), stream->tokens.end()));
    datasets.announcements_.push_back(std::move(announced));
    datasets.paths_.push_back(spec.path);
  }
  return datasets;
}

std::string LocalDatasets::PathOf(absl::string_view name) const {
  for (size_t i = 0; i < announcements_.size(); ++i) {
    if (announcements_[i].name() == name) return paths_[i];
  }
  return "";
}

const v1::LocalDataset* LocalDatasets::Find(absl::string_view sha256) const {
  for (const v1::LocalDataset& dataset : announcements_) {
    if (dataset.sha256() == sha256) return &dataset;
  }
  return nullptr;
}

absl::StatusOr<rpc::TokenStream> LocalDatasets::Read(absl::string_view sha256) const {
  for (size_t i = 0; i < announcements_.size(); ++i) {
    if (announcements_[i].sha256() != sha256) continue;
    const std::string what = absl::StrCat("local dataset ", announcements_[i].name(), " (", paths_[i], ")");
    absl::StatusOr<std::string> bytes = base::ReadFileToString(paths_[i]);
    if (!bytes.ok()) return absl::FailedPreconditionError(absl::StrCat(what, ": ", bytes.status().message()));
    if (base::Sha256Hex(*bytes) != sha256) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the file changed since the worker started (its SHA-256 is no longer ",
                       sha256.substr(0, 12), "…); restart the worker to announce the new contents"));
    }
    absl::StatusOr<rpc::TokenStream> stream =
        rpc::ParseDataset(*bytes, format_.content_type, format_.encoding, format_.separator);
    if (!stream.ok())
      return absl::FailedPreconditionError(absl::StrCat(what, ": ", stream.status().message()));
    return stream;
  }
  return absl::FailedPreconditionError(absl::StrCat("this worker holds no dataset with SHA-256 ", sha256,
                                                    " (it was started without it in --data)"));
}

}  // namespace slimfit::worker
