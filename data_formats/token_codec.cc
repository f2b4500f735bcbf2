#include "data_formats/token_codec.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace slimfit::rpc {

v1::TokenEncoding NarrowestTokenEncoding(int64_t vocab) {
  if (vocab <= 256) return v1::TOKEN_ENCODING_UINT8;
  if (vocab <= 65536) return v1::TOKEN_ENCODING_UINT16_LE;
  return v1::TOKEN_ENCODING_UINT32_LE;
}

int TokenWidth(v1::TokenEncoding encoding) {
  switch (encoding) {
    case v1::TOKEN_ENCODING_UINT8:
      return 1;
    case v1::TOKEN_ENCODING_UINT16_LE:
      return 2;
    case v1::TOKEN_ENCODING_UINT32_LE:
      return 4;
    default:
      return 0;
  }
}

absl::StatusOr<std::string> EncodeTokens(absl::Span<const int64_t> ids, v1::TokenEncoding encoding) {
  const int width = TokenWidth(encoding);
  if (width == 0) return absl::InvalidArgumentError(absl::StrCat("unknown token encoding ", encoding));
  const uint64_t limit = width == 4 ? (uint64_t{1} << 32) : (uint64_t{1} << (8 * width));
  std::string bytes(ids.size() * width, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " = ", ids[i], " does not fit ", v1::TokenEncoding_Name(encoding)));
    }
    uint64_t value = static_cast<uint64_t>(ids[i]);
    for (int b = 0; b < width; ++b) bytes[i * width + b] = static_cast<char>((value >> (8 * b)) & 0xff);
  }
  return bytes;
}

absl::StatusOr<std::vector<int64_t>> DecodeTokens(absl::string_view bytes, v1::TokenEncoding encoding,
                                                  int64_t vocab, absl::string_view field) {
  const int width = TokenWidth(encoding);
  if (width == 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": unknown token encoding ", encoding));
  }
  if (bytes.size() % width != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", bytes.size(), " bytes is not a whole number of ", width, "-byte tokens"));
  }
  std::vector<int64_t> ids(bytes.size() / width);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint64_t value = 0;
    for (int b = 0; b < width; ++b) {
      value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i * width + b])) << (8 * b);
    }
    if (static_cast<int64_t>(value) >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": token ", i, " = ", value, " is outside the vocabulary of ", vocab));
    }
    ids[i] = static_cast<int64_t>(value);
  }
  return ids;
}

}  // namespace slimfit::rpc
