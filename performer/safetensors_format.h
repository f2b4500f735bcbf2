// Internal to //performer:safetensors: what the reader and the writer share — the format's constants
// and dtype names, and error helpers.
#ifndef SLIMFIT_PERFORMER_SAFETENSORS_FORMAT_H_
#define SLIMFIT_PERFORMER_SAFETENSORS_FORMAT_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"

// safetensors stores tensor elements little-endian; tensor bytes are copied
// verbatim between files and host memory, which is only right on such hosts.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace slimfit::performer::safetensors_internal {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

inline constexpr uint64_t kPrefixBytes = 8;  // u64 header length
// Same bound as the reference implementation (which uses 100'000'000): keeps a
// corrupt length from triggering a huge allocation.
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
inline constexpr char kMetadataKey[] = "__metadata__";

// The dtype of a header's "dtype" string; nullopt for an unknown one.
absl::optional<at::ScalarType> DtypeFromName(absl::string_view name);
// The header name of `type`; nullptr for a type the format cannot hold.
const char* NameOfDtype(at::ScalarType type);
// "F64, F32, ..." for messages.
std::string SupportedDtypes();
// "[2, 3]".
std::string ShapeString(absl::Span<const int64_t> shape);

template <typename... Args>
absl::Status Invalid(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

// Prefixes a non-OK status's message with `path`.
absl::Status WithPath(const std::string& path, const absl::Status& status);

}  // namespace slimfit::performer::safetensors_internal

#endif  // SLIMFIT_PERFORMER_SAFETENSORS_FORMAT_H_
