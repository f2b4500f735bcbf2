// The bytes of a dataset as the protocol defines them (DatasetMetadata's content type, token
// encoding and document separator) → a packed token stream. The coordinator parses uploads with it;
// `slimfit score` parses local files the same way, so a file scores as it would train.
//
// Thread safety: pure functions.
#ifndef SLIMFIT_DATA_FORMATS_DATASET_FORMAT_H_
#define SLIMFIT_DATA_FORMATS_DATASET_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/slimfit.pb.h"

namespace slimfit::rpc {

// A packed token stream: tokens and the offsets where documents start (0 first, increasing).
struct TokenStream {
  std::vector<int32_t> tokens;
  std::vector<int64_t> doc_starts;
};

inline constexpr char kTextContentType[] = "text/plain";
inline constexpr char kTokensContentType[] = "application/x-slimfit-tokens";

// How a file is read as a dataset, from what a user writes: `slimfit submit --data_type
// --separator` for an upload, `slimfit-worker --data_type --data_separator` for a dataset that
// stays on the worker.
struct DatasetFormat {
  std::string content_type;                                     // kTextContentType or kTokensContentType
  v1::TokenEncoding encoding = v1::TOKEN_ENCODING_UNSPECIFIED;  // token files only
  std::optional<std::string> separator;                         // the unescaped bytes; none: one document
};

// `data_type` "text" (every byte a token) or "uint8", "uint16", "uint32" (pre-tokenised
// little-endian ids of that width); `separator` with C escapes ("\n\n", "\x1e"), 1..64 bytes once
// unescaped, or empty for none. INVALID_ARGUMENT naming --<type_flag> or --<separator_flag> for an
// unknown type, a malformed escape or a separator of the wrong length.
absl::StatusOr<DatasetFormat> ParseDatasetFormat(absl::string_view data_type, absl::string_view separator,
                                                 absl::string_view type_flag = "data_type",
                                                 absl::string_view separator_flag = "separator");

// A worker's name for a dataset it holds (LocalDataset.name): 1..LIMIT_MAX_NAME_BYTES bytes of
// [A-Za-z0-9._-].
bool IsLocalDatasetName(absl::string_view name);

// Checks what a worker announces of the datasets it holds (RegisterWorkerRequest.local_datasets).
// INVALID_ARGUMENT "local_datasets[i] (NAME): ..." for more than LIMIT_MAX_LOCAL_DATASETS entries,
// a bad or repeated name, tokens < 1, documents outside 1..tokens, a malformed SHA-256, a content
// type that is not a dataset type (or a token file without a width), or a max_token outside
// 0..(the largest id the format can hold).
absl::Status ValidateLocalDatasets(const google::protobuf::RepeatedPtrField<v1::LocalDataset>& datasets);

// Parses an upload's bytes. "text/plain": every byte a token; "application/x-slimfit-tokens": ids in
// `encoding`. `separator` (when given) ends one document and starts the next and is dropped; empty
// documents (two separators in a row) are skipped. INVALID_ARGUMENT for an unknown content type, a
// token file that is not a whole number of tokens or a separator that is not whole tokens.
absl::StatusOr<TokenStream> ParseDataset(absl::string_view bytes, absl::string_view content_type,
                                         v1::TokenEncoding encoding,
                                         const std::optional<std::string>& separator);

// Appends `more` to `stream` (documents stay separate).
void AppendStream(TokenStream* stream, const TokenStream& more);

// Documents in tokens [begin, begin + length) of `stream`: 1 (the range's start counts as a
// document start) plus the documents starting inside it. REQUIRES: stream.doc_starts sorted.
int64_t DocumentsInRange(const TokenStream& stream, int64_t begin, int64_t length);

// Appends tokens [begin, begin + length) of `stream` to *tokens, and the document starts inside
// the range (its own start first) to *doc_starts as offsets into *tokens: one sequence of a shard.
// REQUIRES: 0 ≤ begin, begin + length ≤ stream.tokens.size().
void AppendRange(const TokenStream& stream, int64_t begin, int64_t length, std::vector<int64_t>* tokens,
                 std::vector<int64_t>* doc_starts);

}  // namespace slimfit::rpc

#endif  // SLIMFIT_DATA_FORMATS_DATASET_FORMAT_H_
