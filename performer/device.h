// Devices by name, as the command line gives them: "cpu" or "cuda:N".
//
// Thread safety: a pure function.
#ifndef SLIMFIT_PERFORMER_DEVICE_H_
#define SLIMFIT_PERFORMER_DEVICE_H_

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit::performer {

// INVALID_ARGUMENT "--<flag>=<name>: …" for anything but "cpu" or "cuda:N", and for a CUDA device
// when this build of LibTorch has no CUDA support (the message says to use a CUDA build).
absl::StatusOr<c10::Device> ParseDevice(absl::string_view name, absl::string_view flag = "device");

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_DEVICE_H_
