// Fuzz target: torch.save files (zip archive + pickle), read by performer::ReadTorchStateDict for
// uploaded checkpoints and `--init=model.pt` (performer/torch_state_dict.h).
//
// The input is written to a scratch file and read back. Invariants:
//   - a refusal is INVALID_ARGUMENT and its message starts with the path;
//   - every tensor returned is a defined CPU tensor whose elements lie inside its storage, and
//     its storage's bytes are all readable (copied here by instrumented code, so AddressSanitizer
//     sees a storage larger than its allocation: LibTorch itself is not instrumented).
#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_support.h"
#include "performer/torch_state_dict.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace slimfit;  // NOLINT
  const std::string path =
      fuzz::WriteScratchFile("input.pt", absl::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<std::map<std::string, at::Tensor>> read = performer::ReadTorchStateDict(path);
  if (!read.ok()) {
    SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(read.status()), read.status().ToString());
    SLIMFIT_FUZZ_CHECK(absl::StartsWith(read.status().message(), path), read.status().ToString());
    return 0;
  }
  for (const auto& [name, tensor] : *read) {
    SLIMFIT_FUZZ_CHECK(tensor.defined() && tensor.device().is_cpu() && tensor.has_storage(), "tensor '", name,
                       "'");
    const size_t storage_bytes = tensor.storage().nbytes();
    if (storage_bytes > 0) {
      std::vector<char> copy(storage_bytes);
      std::memcpy(copy.data(), tensor.storage().data(), storage_bytes);
    }
    if (tensor.numel() == 0) continue;
    // The furthest element, in bytes from the storage's start, must lie inside the storage.
    int64_t last = tensor.storage_offset();
    bool negative_stride = false;
    for (int64_t d = 0; d < tensor.dim(); ++d) {
      negative_stride |= tensor.stride(d) < 0;
      last += (tensor.size(d) - 1) * tensor.stride(d);
    }
    SLIMFIT_FUZZ_CHECK(!negative_stride && tensor.storage_offset() >= 0, "tensor '", name, "'");
    const int64_t end_bytes = (last + 1) * static_cast<int64_t>(tensor.element_size());
    SLIMFIT_FUZZ_CHECK(end_bytes <= static_cast<int64_t>(tensor.storage().nbytes()), "tensor '", name,
                       "' reaches byte ", end_bytes, " of a ", tensor.storage().nbytes(), "-byte storage");
  }
  return 0;
}
