#include "client/calibrate_command.h"

#include <ATen/Context.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "client/json_output.h"
#include "nlohmann/json.hpp"
#include "performer/plan.h"
#include "planner/calibration.h"
#include "planner/device_profile_io.h"

namespace slimfit::client {

absl::StatusOr<CalibrationOutcome> CalibrateDevice(const CalibrationRequest& request) {
  // A CUDA device with a CPU-only LibTorch (Debian's) would fail deep inside the engine with a
  // list of every dispatch key; say what is wrong instead. Device strings LibTorch cannot parse
  // are left to Calibrate, which reports them.
  try {
    const c10::Device device(request.device);
    if (device.is_cuda() && !at::hasCUDA()) {
      return absl::FailedPreconditionError(
          absl::StrCat("calibrating ", request.device,
                       ": this build of LibTorch has no CUDA support; use --device=cpu or a CUDA build"));
    }
  } catch (const c10::Error&) {
  }
  planner::CalibrationOptions options;
  options.device = request.device;
  options.threads = request.threads;
  options.dtype = request.dtype;
  absl::StatusOr<planner::CalibrationResult> result = planner::Calibrate(options);
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat("calibrating ", request.device, ": ", result.status().message()));
  }
  CalibrationOutcome outcome;
  outcome.profile = result->profile;
  outcome.warnings = result->Warnings();
  for (const planner::ProbeResult& probe : result->probes) {
    outcome.probes.push_back(CalibrationProbe{probe.plan.slice, probe.seconds, probe.working_bytes,
                                              probe.seq_len, probe.graph_pool_bytes, probe.pool_only});
  }
  return outcome;
}

absl::Status RunCalibrateCommand(absl::Span<const std::string> args, std::ostream& out,
                                 const DeviceCalibrator& calibrate) {
  std::string device = "cpu";
  int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::string dtype_name = "float32";
  std::string out_path;
  bool json = false;
  base::FlagSet flags("calibrate",
                      "slimfit calibrate [--device=cpu] [--threads=N] [--dtype=float32] [--out=FILE] "
                      "[--json]",
                      "Measures the device with short probes of the real gradient engine (seconds to a\n"
                      "minute) and prints its profile as a text-format slimfit.v1.DeviceProfile, or writes\n"
                      "it atomically to --out for 'slimfit plan --profile=FILE'.");
  flags.String("device", &device, "device to measure: cpu, cuda:0");
  flags.Int("threads", &threads,
            "compute threads, which plans made from the profile assume (default: the cores available)",
            base::FlagSet::kOptionalNoDefault);
  flags.String("dtype", &dtype_name, "float32 or float64");
  flags.String("out", &out_path, "write the profile to this file (atomically) instead of stdout");
  flags.Bool("json", &json, "print one JSON object (profile and probes) instead of text");
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help_requested()) {
    out << flags.Help();
    return absl::OkStatus();
  }
  if (threads < 1 || threads > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", threads, ": expected 1 to 4096"));
  }
  if (device.empty()) return absl::InvalidArgumentError("--device is empty; expected e.g. cpu");
  if (flags.IsSet("out") && out_path.empty()) {
    return absl::InvalidArgumentError("--out is empty; expected a file name");
  }
  absl::StatusOr<performer::DType> dtype = performer::ParseDType(dtype_name);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: ", dtype.status().message()));
  }

  CalibrationRequest request;
  request.device = device;
  request.threads = static_cast<int>(threads);
  request.dtype = *dtype;
  absl::StatusOr<CalibrationOutcome> outcome = calibrate(request);
  if (!outcome.ok()) return outcome.status();
  if (!out_path.empty()) {
    if (absl::Status s = planner::WriteDeviceProfile(out_path, outcome->profile); !s.ok()) return s;
  }

  if (json) {
    nlohmann::ordered_json report;
    report["profile"] = DeviceProfileToJson(outcome->profile);
    report["out"] = out_path.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(out_path);
    nlohmann::ordered_json probes = nlohmann::ordered_json::array();
    for (const CalibrationProbe& probe : outcome->probes) {
      nlohmann::ordered_json entry;
      entry["slice"] = probe.slice;
      entry["seconds"] = probe.seconds;
      entry["working_bytes"] = probe.working_bytes;
      entry["seq_len"] = probe.seq_len;
      entry["graph_pool_bytes"] = probe.graph_pool_bytes;
      entry["pool_only"] = probe.pool_only;
      probes.push_back(std::move(entry));
    }
    report["probes"] = std::move(probes);
    report["warnings"] = outcome->warnings;
    out << report.dump(2) << "\n";
  } else if (!out_path.empty()) {
    out << "wrote the profile of " << outcome->profile.device
        << (outcome->profile.device_name.empty() ? "" : " (" + outcome->profile.device_name + ")") << ", "
        << outcome->profile.threads << " thread" << (outcome->profile.threads == 1 ? "" : "s") << ", to "
        << out_path << "\n";
    for (const std::string& warning : outcome->warnings) out << "warning: " << warning << "\n";
  } else {
    // Comments in the text format: the output still reads as a profile.
    for (const std::string& warning : outcome->warnings) out << "# warning: " << warning << "\n";
    out << planner::DeviceProfileToText(outcome->profile);
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
