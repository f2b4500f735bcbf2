// The bytes of a dataset as the protocol defines them (DatasetMetadata's content type, token
// encoding and document separator) → a packed token stream. The coordinator parses uploads with it;
// `slimfit score` parses local files the same way, so a file scores as it would train.
//
// Thread safety: pure functions.
#ifndef SLIMFIT_PROTO_DATASET_FORMAT_H_
#define SLIMFIT_PROTO_DATASET_FORMAT_H_

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

// Parses an upload's bytes. "text/plain": every byte a token; "application/x-slimfit-tokens": ids in
// `encoding`. `separator` (when given) ends one document and starts the next and is dropped; empty
// documents (two separators in a row) are skipped. INVALID_ARGUMENT for an unknown content type, a
// token file that is not a whole number of tokens or a separator that is not whole tokens.
absl::StatusOr<TokenStream> ParseDataset(absl::string_view bytes, absl::string_view content_type,
                                         v1::TokenEncoding encoding, const std::optional<std::string>& separator);

// Appends `more` to `stream` (documents stay separate).
void AppendStream(TokenStream* stream, const TokenStream& more);

}  // namespace slimfit::rpc

#endif  // SLIMFIT_PROTO_DATASET_FORMAT_H_
