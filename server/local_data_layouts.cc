#include "server/local_data_layouts.h"

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "rpc/rpc_util.h"

namespace slimfit::server {
namespace {

std::string Field(int index) { return absl::StrCat("spec.local_datasets[", index, "]"); }

}  // namespace

absl::StatusOr<std::vector<std::string>> LocalDataLayouts::Resolve(
    const google::protobuf::RepeatedPtrField<std::string>& entries) const {
  if (entries.size() > v1::LIMIT_MAX_LOCAL_DATASETS) {
    return rpc::InvalidFieldError("spec.local_datasets", absl::StrCat(entries.size(), " datasets; at most ",
                                                                      v1::LIMIT_MAX_LOCAL_DATASETS));
  }
  if (entries.empty()) return std::vector<std::string>{};
  // Every registered worker's announcements, gone ones too: a job may name data whose holders are
  // restarting.
  std::map<std::string, std::set<std::string>> digests_of_name;
  std::set<std::string> announced;
  for (const v1::WorkerInfo& worker : registry_->List(/*include_gone=*/true)) {
    for (const v1::LocalDataset& dataset : worker.local_datasets()) {
      digests_of_name[dataset.name()].insert(dataset.sha256());
      announced.insert(dataset.sha256());
    }
  }
  std::vector<std::string> digests;
  for (int i = 0; i < entries.size(); ++i) {
    const std::string& entry = entries[i];
    std::string digest;
    if (base::IsSha256Hex(entry)) {
      if (announced.count(entry) == 0) {
        return rpc::InvalidFieldError(
            Field(i), absl::StrCat("no registered worker holds a dataset with SHA-256 ", entry,
                                   " (slimfit workers lists what they hold)"));
      }
      digest = entry;
    } else {
      auto it = digests_of_name.find(entry);
      if (it == digests_of_name.end()) {
        return rpc::InvalidFieldError(Field(i),
                                      absl::StrCat("no registered worker holds a dataset named '", entry,
                                                   "' (slimfit workers lists what they hold)"));
      }
      if (it->second.size() > 1) {
        return rpc::InvalidFieldError(
            Field(i), absl::StrCat("workers hold ", it->second.size(), " different datasets named '", entry,
                                   "'; name one by its SHA-256 (slimfit workers shows them)"));
      }
      digest = *it->second.begin();
    }
    for (size_t j = 0; j < digests.size(); ++j) {
      if (digests[j] == digest) {
        return rpc::InvalidFieldError(Field(i),
                                      absl::StrCat("the same dataset as spec.local_datasets[", j, "]"));
      }
    }
    digests.push_back(std::move(digest));
  }
  return digests;
}

absl::StatusOr<LocalSource> LocalDataLayouts::Source(const std::string& sha256, int64_t sequence_length,
                                                     int64_t vocab, int index) const {
  // What its holders announced, and the live ones.
  std::optional<v1::LocalDataset> announced;
  std::vector<std::string> live_holders;
  for (const v1::WorkerInfo& worker : registry_->List(/*include_gone=*/true)) {
    for (const v1::LocalDataset& dataset : worker.local_datasets()) {
      if (dataset.sha256() != sha256) continue;
      if (!announced.has_value()) announced = dataset;
      if (worker.state() == v1::WORKER_STATE_IDLE || worker.state() == v1::WORKER_STATE_BUSY) {
        live_holders.push_back(worker.worker_id());
      }
    }
  }
  if (announced.has_value() && announced->max_token() >= vocab) {
    return rpc::InvalidFieldError(
        Field(index), absl::StrCat("local dataset ", announced->name(), " holds token id ",
                                   announced->max_token(), ", outside the model's vocabulary of ", vocab));
  }
  absl::StatusOr<std::optional<v1::LocalDataLayout>> stored = store_->GetLocalLayout(sha256, sequence_length);
  if (!stored.ok()) return stored.status();
  v1::LocalDataLayout layout;
  if (stored->has_value()) {
    // Stored when the job was submitted: a restarted coordinator resumes without any holder (their
    // announcements come back as they register again).
    layout = **stored;
  } else if (!announced.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Field(index), ": no registered worker holds a dataset with SHA-256 ", sha256));
  } else {
    absl::Status last = absl::FailedPreconditionError(
        absl::StrCat(Field(index), ": no worker holding local dataset ", announced->name(), " (SHA-256 ",
                     sha256.substr(0, 12), "…) is live to describe it; start one, then submit again"));
    bool found = false;
    for (const std::string& id : live_holders) {
      std::optional<WorkerHandle> holder = registry_->Find(id);
      if (!holder.has_value()) continue;
      absl::StatusOr<v1::LocalDataLayout> asked = Ask(*holder, *announced, sequence_length);
      if (!asked.ok()) {
        last =
            absl::Status(asked.status().code(), absl::StrCat(Field(index), ": ", asked.status().message()));
        continue;
      }
      layout = *std::move(asked);
      found = true;
      break;
    }
    if (!found) return last;
    if (absl::Status put = store_->PutLocalLayout(layout); !put.ok()) return put;
  }
  LocalSource source;
  source.sha256 = sha256;
  source.name = announced.has_value() ? announced->name() : absl::StrCat("sha256:", sha256.substr(0, 12));
  source.documents.assign(layout.documents().begin(), layout.documents().end());
  return source;
}

absl::StatusOr<v1::LocalDataLayout> LocalDataLayouts::Ask(const WorkerHandle& holder,
                                                          const v1::LocalDataset& announced,
                                                          int64_t sequence_length) const {
  const int64_t sequences = announced.tokens() / sequence_length;
  const std::string who =
      absl::StrCat("worker ", holder.worker_id, " describing local dataset ", announced.name());
  v1::LocalDataLayout whole;
  whole.set_sha256(announced.sha256());
  whole.set_sequence_length(sequence_length);
  whole.set_sequences(sequences);
  while (whole.documents_size() < sequences) {
    v1::DescribeLocalDataRequest request;
    request.set_sha256(announced.sha256());
    request.set_sequence_length(sequence_length);
    request.set_first_sequence(whole.documents_size());
    v1::LocalDataLayout page;
    auto context = rpc::MakeClientContext(
        holder.call_token, std::chrono::milliseconds(absl::ToInt64Milliseconds(call_timeout_)));
    grpc::Status status = holder.stub->DescribeLocalData(context.get(), request, &page);
    if (!status.ok()) return rpc::FromGrpcStatus(status, who, context.get());
    if (page.sha256() != announced.sha256() || page.sequence_length() != sequence_length ||
        page.sequences() != sequences || page.first_sequence() != whole.documents_size() ||
        page.documents_size() == 0 || page.documents_size() > v1::LIMIT_MAX_LAYOUT_PAGE ||
        whole.documents_size() + page.documents_size() > sequences) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, ": the answer does not match the request or the announcement (", page.sequences(),
                       " sequences from ", page.first_sequence(), ", ", page.documents_size(),
                       " entries; expected ", sequences, " sequences from ", whole.documents_size(), ")"));
    }
    for (const int64_t documents : page.documents()) {
      if (documents < 1 || documents > sequence_length) {
        return absl::FailedPreconditionError(
            absl::StrCat(who, ": a sequence of ", sequence_length, " tokens with ", documents, " documents"));
      }
      whole.add_documents(documents);
    }
  }
  whole.set_next_sequence(sequences);
  return whole;
}

}  // namespace slimfit::server
