// `slimfit calibrate`: measures a device with short probes of the real gradient engine
// (planner/calibration.h) and prints its DeviceProfile as a text-format slimfit.v1.DeviceProfile,
// or writes it atomically to --out for `slimfit plan --profile` and workers.
//
//   slimfit calibrate --device=cpu --threads=2 --out=cpu.profile
//
// Also home of CalibrateDevice, the DeviceCalibrator that runs planner::Calibrate; this library
// is the one that links LibTorch.
//
// Thread safety: calibration runs gradients and sets process-wide thread counts; one at a time.
#ifndef SLIMFIT_CLIENT_CALIBRATE_COMMAND_H_
#define SLIMFIT_CLIENT_CALIBRATE_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/device_calibrator.h"

namespace slimfit::client {

// Runs planner::Calibrate with its default probe model and sequence on `request.device` with
// `request.threads` threads and `request.dtype`. Takes seconds to a minute. Errors: those of
// Calibrate (INVALID_ARGUMENT for an unknown device or threads < 1, the engine's otherwise),
// prefixed "calibrating <device>: "; FAILED_PRECONDITION for a CUDA device when LibTorch was built
// without CUDA.
absl::StatusOr<CalibrationOutcome> CalibrateDevice(const CalibrationRequest& request);

// Flags: --device (default cpu), --threads (default: the CPU cores available), --dtype
// (float32|float64), --out=FILE, --json.
// Text: without --out the profile as text format, after a "# warning: ..." comment line for each of
// the calibration's warnings; with --out one line saying where it was written, then "warning: ..."
// lines. JSON: {"profile": {...DeviceProfileToJson}, "out": FILE or null, "probes": [{slice,
// seconds, working_bytes}], "warnings": [...]}; with --out the file is written as well.
// Errors: INVALID_ARGUMENT for bad flags; the calibrator's errors; WriteDeviceProfile's errors
// (NOT_FOUND for a missing directory, PERMISSION_DENIED, INTERNAL).
absl::Status RunCalibrateCommand(absl::Span<const std::string> args, std::ostream& out,
                                 const DeviceCalibrator& calibrate);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_CALIBRATE_COMMAND_H_
