// DeviceCalibrator: how a command obtains a DeviceProfile by measuring the device now.
//
// `slimfit plan --device=cpu` and `slimfit calibrate` both calibrate; the real implementation
// (CalibrateDevice in client/calibrate_command.h) runs the LibTorch engine. Commands take the
// calibrator as an argument so that only the binary, not every command library, links LibTorch,
// and so that a command's own logic (flags, output, files) can be tested without spending the
// seconds a real calibration takes.
//
// Thread safety: a calibrator runs gradients on the device and sets process-wide thread counts;
// call one at a time.
#ifndef SLIMFIT_CLIENT_DEVICE_CALIBRATOR_H_
#define SLIMFIT_CLIENT_DEVICE_CALIBRATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "performer/plan.h"
#include "planner/device_profile.h"

namespace slimfit::client {

struct CalibrationRequest {
  std::string device = "cpu";  // as for --device: "cpu", "cuda:0"
  int threads = 1;             // compute threads, >= 1
  performer::DType dtype = performer::DType::kFloat32;
};

// One probe of a calibration, for reports (`slimfit calibrate --json`).
struct CalibrationProbe {
  int64_t slice = 0;  // 0: full back-propagation
  double seconds = 0;
  int64_t working_bytes = 0;
  int64_t seq_len = 0;
  int64_t graph_pool_bytes = 0;  // the CUDA graphs' pool (in working_bytes); 0 where slices ran op by op
  bool pool_only = false;        // a graph-pool probe: one call (its capture included), not a timed median
};

struct CalibrationOutcome {
  planner::DeviceProfile profile;
  std::vector<CalibrationProbe> probes;
  // What the profile leaves unmeasured and why, one sentence each (bfloat16 products the device
  // cannot run, or bfloat16 constants the probes could not fit).
  std::vector<std::string> warnings;
};

// INVALID_ARGUMENT for an unknown device or threads < 1; the engine's errors otherwise.
using DeviceCalibrator = std::function<absl::StatusOr<CalibrationOutcome>(const CalibrationRequest& request)>;

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_DEVICE_CALIBRATOR_H_
