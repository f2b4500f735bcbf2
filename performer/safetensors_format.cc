#include "performer/safetensors_format.h"

#include "absl/strings/str_join.h"

namespace slimfit::performer::safetensors_internal {
namespace {

struct DtypeName {
  const char* name;
  at::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
    {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
    {"U8", at::kByte},    {"BOOL", at::kBool},
};

}  // namespace

absl::optional<at::ScalarType> DtypeFromName(absl::string_view name) {
  for (const DtypeName& d : kDtypes) {
    if (name == d.name) return d.type;
  }
  return absl::nullopt;
}

const char* NameOfDtype(at::ScalarType type) {
  for (const DtypeName& d : kDtypes) {
    if (type == d.type) return d.name;
  }
  return nullptr;
}

std::string SupportedDtypes() {
  return absl::StrJoin(kDtypes, ", ", [](std::string* out, const DtypeName& d) { out->append(d.name); });
}

absl::Status WithPath(const std::string& path, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace slimfit::performer::safetensors_internal
