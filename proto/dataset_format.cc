#include "proto/dataset_format.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/token_codec.h"

namespace slimfit::rpc {

absl::StatusOr<TokenStream> ParseDataset(absl::string_view bytes, absl::string_view content_type,
                                         v1::TokenEncoding encoding, const std::optional<std::string>& separator) {
  int width = 1;
  if (content_type == "application/x-slimfit-tokens") {
    width = TokenWidth(encoding);
    if (width == 0) return absl::InvalidArgumentError("metadata.token_encoding: required for a token file");
  } else if (content_type != "text/plain") {
    return absl::InvalidArgumentError(absl::StrCat("metadata.content_type: \"", content_type, "\" is not a dataset type"));
  }
  if (bytes.size() % width != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset of ", bytes.size(), " bytes is not a whole number of ", width, "-byte tokens"));
  }
  if (separator.has_value() && (separator->empty() || separator->size() % width != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata.document_separator: ", separator->size(), " bytes is not a whole number of tokens"));
  }
  TokenStream stream;
  stream.tokens.reserve(bytes.size() / width);
  bool document_open = false;
  size_t i = 0;
  while (i < bytes.size()) {
    if (separator.has_value() && bytes.substr(i, separator->size()) == *separator) {
      document_open = false;
      i += separator->size();
      continue;
    }
    if (!document_open) {
      stream.doc_starts.push_back(static_cast<int64_t>(stream.tokens.size()));
      document_open = true;
    }
    uint32_t value = 0;
    for (int b = 0; b < width; ++b) value |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + b])) << (8 * b);
    stream.tokens.push_back(static_cast<int32_t>(value));
    i += width;
  }
  return stream;
}

void AppendStream(TokenStream* stream, const TokenStream& more) {
  const int64_t offset = static_cast<int64_t>(stream->tokens.size());
  stream->tokens.insert(stream->tokens.end(), more.tokens.begin(), more.tokens.end());
  for (int64_t start : more.doc_starts) stream->doc_starts.push_back(offset + start);
}

}  // namespace slimfit::rpc
