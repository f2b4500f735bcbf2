// Fuzz target: safetensors, the format of checkpoints, exports and uploaded models
// (performer/safetensors.h).
//
// Every input goes through both readers, ParseSafetensors (bytes in memory) and ReadSafetensors
// (the same bytes as a file). Invariants:
//   - both accept or both refuse, with the same canonical code: INVALID_ARGUMENT, or
//     RESOURCE_EXHAUSTED for a tensor that cannot be allocated;
//   - they return the same tensors and metadata;
//   - an accepted file serialises (SerializeSafetensors) to bytes that parse back to the same
//     tensors and metadata and serialise to the same bytes again (the writer is deterministic).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_support.h"
#include "performer/safetensors.h"

namespace slimfit::fuzz {
namespace {

using performer::TensorFile;

// Equal names, dtypes, shapes, bytes and metadata ("" when equal, else what differs).
std::string Difference(const TensorFile& a, const TensorFile& b) {
  if (a.metadata != b.metadata) return "metadata differ";
  if (a.tensors.size() != b.tensors.size())
    return absl::StrCat(a.tensors.size(), " vs ", b.tensors.size(), " tensors");
  for (auto ia = a.tensors.begin(), ib = b.tensors.begin(); ia != a.tensors.end(); ++ia, ++ib) {
    const at::Tensor& x = ia->second;
    const at::Tensor& y = ib->second;
    if (ia->first != ib->first) return absl::StrCat("names '", ia->first, "' vs '", ib->first, "'");
    if (x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes())
      return absl::StrCat("tensor '", ia->first, "' dtype or shape");
    if (!x.is_contiguous() || !y.is_contiguous())
      return absl::StrCat("tensor '", ia->first, "' not contiguous");
    if (x.nbytes() != y.nbytes()) return absl::StrCat("tensor '", ia->first, "' byte count");
    if (x.nbytes() > 0 && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) {
      return absl::StrCat("tensor '", ia->first, "' bytes");
    }
  }
  return "";
}

}  // namespace
}  // namespace slimfit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace slimfit;        // NOLINT
  using namespace slimfit::fuzz;  // NOLINT
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<performer::TensorFile> parsed = performer::ParseSafetensors(bytes);
  absl::StatusOr<performer::TensorFile> read =
      performer::ReadSafetensors(WriteScratchFile("input.safetensors", bytes));
  SLIMFIT_FUZZ_CHECK(parsed.status().code() == read.status().code(),
                     "ParseSafetensors: ", parsed.status().ToString(),
                     "; ReadSafetensors: ", read.status().ToString());
  if (!parsed.ok()) {
    SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(parsed.status()) || absl::IsResourceExhausted(parsed.status()),
                       parsed.status().ToString());
    return 0;
  }
  const std::string file_difference = Difference(*parsed, *read);
  SLIMFIT_FUZZ_CHECK(file_difference.empty(), "ParseSafetensors vs ReadSafetensors: ", file_difference);

  absl::StatusOr<std::string> serialized = performer::SerializeSafetensors(*parsed);
  SLIMFIT_FUZZ_CHECK(serialized.ok(),
                     "an accepted file does not serialise: ", serialized.status().ToString());
  absl::StatusOr<performer::TensorFile> reparsed = performer::ParseSafetensors(*serialized);
  SLIMFIT_FUZZ_CHECK(reparsed.ok(), "serialised bytes do not parse: ", reparsed.status().ToString());
  const std::string round_trip_difference = Difference(*parsed, *reparsed);
  SLIMFIT_FUZZ_CHECK(round_trip_difference.empty(), "round trip: ", round_trip_difference);
  absl::StatusOr<std::string> again = performer::SerializeSafetensors(*reparsed);
  SLIMFIT_FUZZ_CHECK(again.ok() && *again == *serialized, "serialisation is not deterministic");
  return 0;
}
