// Token ids on the wire (slimfit.v1.TokenEncoding): fixed width, little-endian, unsigned. The
// narrowest encoding that holds vocab − 1 is used (UINT8 for the byte-level vocabulary).
//
// Thread safety: pure functions.
#ifndef SLIMFIT_DATA_FORMATS_TOKEN_CODEC_H_
#define SLIMFIT_DATA_FORMATS_TOKEN_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/slimfit.pb.h"

namespace slimfit::rpc {

// The narrowest encoding for ids in [0, vocab).
v1::TokenEncoding NarrowestTokenEncoding(int64_t vocab);
// Bytes per token: 1, 2, 4; 0 for UNSPECIFIED or unknown values.
int TokenWidth(v1::TokenEncoding encoding);

// REQUIRES: every id fits the encoding (checked: INVALID_ARGUMENT naming the first that does not).
absl::StatusOr<std::string> EncodeTokens(absl::Span<const int64_t> ids, v1::TokenEncoding encoding);

// INVALID_ARGUMENT (prefixed by `field`) for an unknown encoding, a length that is not a whole
// number of tokens, or an id ≥ vocab (naming its offset and value).
absl::StatusOr<std::vector<int64_t>> DecodeTokens(absl::string_view bytes, v1::TokenEncoding encoding,
                                                  int64_t vocab, absl::string_view field);

}  // namespace slimfit::rpc

#endif  // SLIMFIT_DATA_FORMATS_TOKEN_CODEC_H_
