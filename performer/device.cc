#include "performer/device.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace slimfit::performer {

absl::StatusOr<c10::Device> ParseDevice(absl::string_view name, absl::string_view flag) {
  try {
    const c10::Device device{std::string(name)};
    if (device.is_cpu() && name == "cpu") return device;
    if (device.is_cuda() && device.has_index()) {
      if (!at::hasCUDA()) {
        return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", name,
                                                       ": this build of LibTorch has no CUDA support; use --",
                                                       flag, "=cpu or a CUDA build"));
      }
      return device;
    }
  } catch (const c10::Error&) {
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", name, ": expected cpu or cuda:N (e.g. cuda:0)"));
}

}  // namespace slimfit::performer
