#include "worker/local_data_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "rpc/rpc_util.h"

namespace slimfit::worker {

absl::StatusOr<std::shared_ptr<const rpc::TokenStream>> LocalDataReader::Stream(const std::string& sha256) {
  absl::MutexLock lock(&mu_);
  if (cached_ != nullptr && cached_sha256_ == sha256) return cached_;
  absl::StatusOr<rpc::TokenStream> stream = datasets_->Read(sha256);
  if (!stream.ok()) return stream.status();
  if (stream->doc_starts.empty() || stream->doc_starts.front() != 0) {
    stream->doc_starts.insert(stream->doc_starts.begin(), 0);
  }
  cached_ = std::make_shared<const rpc::TokenStream>(*std::move(stream));
  cached_sha256_ = sha256;
  return cached_;
}

absl::StatusOr<v1::LocalDataLayout> LocalDataReader::Describe(const v1::DescribeLocalDataRequest& request) {
  if (!base::IsSha256Hex(request.sha256())) {
    return rpc::InvalidFieldError("sha256", "must be 64 lowercase hexadecimal characters");
  }
  const int64_t length = request.sequence_length();
  if (length < 2 || length > v1::LIMIT_MAX_CHUNK_BYTES) {
    return rpc::InvalidFieldError(
        "sequence_length", absl::StrCat("must be in [2, ", v1::LIMIT_MAX_CHUNK_BYTES, "], got ", length));
  }
  absl::StatusOr<std::shared_ptr<const rpc::TokenStream>> stream = Stream(request.sha256());
  if (!stream.ok()) return stream.status();
  const int64_t sequences = static_cast<int64_t>((*stream)->tokens.size()) / length;
  if (request.first_sequence() < 0 || request.first_sequence() > sequences) {
    return rpc::InvalidFieldError("first_sequence",
                                  absl::StrCat(request.first_sequence(), " is outside [0, ", sequences,
                                               "] (the dataset's whole sequences)"));
  }
  v1::LocalDataLayout layout;
  layout.set_sha256(request.sha256());
  layout.set_sequence_length(length);
  layout.set_sequences(sequences);
  layout.set_first_sequence(request.first_sequence());
  const int64_t end = std::min(sequences, request.first_sequence() + int64_t{v1::LIMIT_MAX_LAYOUT_PAGE});
  for (int64_t s = request.first_sequence(); s < end; ++s) {
    layout.add_documents(rpc::DocumentsInRange(**stream, s * length, length));
  }
  layout.set_next_sequence(end);
  return layout;
}

absl::StatusOr<LocalDataReader::Sequences> LocalDataReader::Read(const v1::LocalDataShard& shard,
                                                                 int64_t sequence_length) {
  absl::StatusOr<std::shared_ptr<const rpc::TokenStream>> stream = Stream(shard.sha256());
  if (!stream.ok()) return stream.status();
  const int64_t sequences = static_cast<int64_t>((*stream)->tokens.size()) / sequence_length;
  Sequences out;
  for (int i = 0; i < shard.sequences_size(); ++i) {
    const int64_t index = shard.sequences(i);
    if (index < 0 || index >= sequences) {
      return rpc::InvalidFieldError(
          "local_data.sequences",
          absl::StrCat("entry ", i, " = ", index, " is outside [0, ", sequences,
                       ") (the dataset's whole sequences of ", sequence_length, " tokens)"));
    }
    rpc::AppendRange(**stream, index * sequence_length, sequence_length, &out.tokens, &out.doc_starts);
  }
  if (static_cast<int64_t>(out.doc_starts.size()) > v1::LIMIT_MAX_SHARD_DOC_STARTS) {
    return rpc::InvalidFieldError("local_data.sequences",
                                  absl::StrCat("the sequences hold ", out.doc_starts.size(),
                                               " document starts; at most ", v1::LIMIT_MAX_SHARD_DOC_STARTS));
  }
  return out;
}

}  // namespace slimfit::worker
