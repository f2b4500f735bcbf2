#include "data_formats/dataset_format.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "data_formats/token_codec.h"

namespace slimfit::rpc {

bool IsLocalDatasetName(absl::string_view name) {
  if (name.empty() || name.size() > static_cast<size_t>(v1::LIMIT_MAX_NAME_BYTES)) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status ValidateLocalDatasets(const google::protobuf::RepeatedPtrField<v1::LocalDataset>& datasets) {
  if (datasets.size() > v1::LIMIT_MAX_LOCAL_DATASETS) {
    return absl::InvalidArgumentError(absl::StrCat("local_datasets: ", datasets.size(), " entries; at most ",
                                                   v1::LIMIT_MAX_LOCAL_DATASETS));
  }
  std::set<std::string> names;
  for (int i = 0; i < datasets.size(); ++i) {
    const v1::LocalDataset& d = datasets[i];
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("local_datasets[", i, "] (", d.name(), "): ", why));
    };
    if (!IsLocalDatasetName(d.name())) {
      return bad(
          absl::StrCat("name: expected 1 to ", v1::LIMIT_MAX_NAME_BYTES, " letters, digits, '.', '_', '-'"));
    }
    if (!names.insert(d.name()).second) return bad("name: given twice");
    if (d.tokens() < 1) return bad(absl::StrCat("tokens: must be ≥ 1, got ", d.tokens()));
    if (d.documents() < 1 || d.documents() > d.tokens()) {
      return bad(absl::StrCat("documents: expected 1 to ", d.tokens(), " (its tokens), got ", d.documents()));
    }
    if (!base::IsSha256Hex(d.sha256())) return bad("sha256: expected 64 lowercase hexadecimal characters");
    int width = 1;
    if (d.content_type() == kTokensContentType) {
      width = TokenWidth(d.token_encoding());
      if (width == 0) return bad("token_encoding: required for a token file");
    } else if (d.content_type() != kTextContentType) {
      return bad(absl::StrCat("content_type: \"", d.content_type(), "\" is not a dataset type"));
    }
    const int64_t largest = width >= 4 ? int64_t{0xFFFFFFFF} : (int64_t{1} << (8 * width)) - 1;
    if (d.max_token() < 0 || d.max_token() > largest) {
      return bad(absl::StrCat("max_token: expected 0 to ", largest, ", got ", d.max_token()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DatasetFormat> ParseDatasetFormat(absl::string_view data_type, absl::string_view separator,
                                                 absl::string_view type_flag,
                                                 absl::string_view separator_flag) {
  constexpr size_t kMaxSeparatorBytes = 64;
  DatasetFormat format;
  const std::string type = absl::AsciiStrToLower(data_type);
  if (type == "text") {
    format.content_type = kTextContentType;
  } else if (type == "uint8" || type == "uint16" || type == "uint32") {
    format.content_type = kTokensContentType;
    format.encoding = type == "uint8"    ? v1::TOKEN_ENCODING_UINT8
                      : type == "uint16" ? v1::TOKEN_ENCODING_UINT16_LE
                                         : v1::TOKEN_ENCODING_UINT32_LE;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--", type_flag, "=", data_type, ": expected text, uint8, uint16 or uint32"));
  }
  if (!separator.empty()) {
    std::string bytes;
    std::string error;
    if (!absl::CUnescape(separator, &bytes, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", separator_flag, "=", separator, ": ", error));
    }
    if (bytes.empty() || bytes.size() > kMaxSeparatorBytes) {
      return absl::InvalidArgumentError(absl::StrCat("--", separator_flag, "=", separator, ": expected 1 to ",
                                                     kMaxSeparatorBytes, " bytes, got ", bytes.size()));
    }
    format.separator = std::move(bytes);
  }
  return format;
}

absl::StatusOr<TokenStream> ParseDataset(absl::string_view bytes, absl::string_view content_type,
                                         v1::TokenEncoding encoding,
                                         const std::optional<std::string>& separator) {
  int width = 1;
  if (content_type == kTokensContentType) {
    width = TokenWidth(encoding);
    if (width == 0) return absl::InvalidArgumentError("metadata.token_encoding: required for a token file");
  } else if (content_type != kTextContentType) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata.content_type: \"", content_type, "\" is not a dataset type"));
  }
  if (bytes.size() % width != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset of ", bytes.size(), " bytes is not a whole number of ", width, "-byte tokens"));
  }
  if (separator.has_value() && (separator->empty() || separator->size() % width != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("metadata.document_separator: ", separator->size(),
                                                   " bytes is not a whole number of tokens"));
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
    for (int b = 0; b < width; ++b)
      value |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + b])) << (8 * b);
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

int64_t DocumentsInRange(const TokenStream& stream, int64_t begin, int64_t length) {
  const auto& starts = stream.doc_starts;
  auto first = std::upper_bound(starts.begin(), starts.end(), begin);
  auto last = std::lower_bound(starts.begin(), starts.end(), begin + length);
  return 1 + std::max<int64_t>(0, last - first);
}

void AppendRange(const TokenStream& stream, int64_t begin, int64_t length, std::vector<int64_t>* tokens,
                 std::vector<int64_t>* doc_starts) {
  const int64_t base = static_cast<int64_t>(tokens->size());
  doc_starts->push_back(base);
  const auto& starts = stream.doc_starts;
  for (auto it = std::upper_bound(starts.begin(), starts.end(), begin);
       it != starts.end() && *it < begin + length; ++it) {
    doc_starts->push_back(base + (*it - begin));
  }
  tokens->insert(tokens->end(), stream.tokens.begin() + begin, stream.tokens.begin() + begin + length);
}

}  // namespace slimfit::rpc
