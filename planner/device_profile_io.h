// Reading and writing DeviceProfiles as text-format protos (proto/device_profile.proto, message
// slimfit.v1.DeviceProfile): the files `slimfit calibrate --out` writes, `slimfit plan --profile`
// reads, and workers keep in their state directory.
//
// Example:
//   absl::StatusOr<DeviceProfile> profile = ReadDeviceProfile("/var/lib/slimfit/profile.txtpb");
//   if (!profile.ok()) return profile.status();   // NOT_FOUND, INVALID_ARGUMENT "...: line 3, ..."
//   profile->activation_scale *= 1.1;
//   if (absl::Status s = WriteDeviceProfile(path, *profile); !s.ok()) return s;
//
// Fields missing from the text keep planner::DeviceProfile's defaults (every field has explicit
// presence in the proto), so profiles written before a field was added still read. Everything
// read is checked with DeviceProfile::Validate().
//
// Thread safety: pure functions, except that the file functions touch the file system; concurrent
// WriteDeviceProfile calls on one path leave one complete profile (the last rename wins).
#ifndef SLIMFIT_PLANNER_DEVICE_PROFILE_IO_H_
#define SLIMFIT_PLANNER_DEVICE_PROFILE_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/device_profile.h"
#include "proto/device_profile.pb.h"

namespace slimfit::planner {

// Field-for-field conversions. ToProto sets every field (not the superseded bf16_time_ratio).
// FromProto starts from a default DeviceProfile and copies the fields present in `proto`; a
// positive bf16_time_ratio without bf16_flops_per_second (a profile calibrated before engine
// revision 8) becomes bfloat16 products at flops_per_second / bf16_time_ratio with the float32
// half-rate rows and layer overhead. It does not validate.
v1::DeviceProfile DeviceProfileToProto(const DeviceProfile& profile);
DeviceProfile DeviceProfileFromProto(const v1::DeviceProfile& proto);

// DeviceProfileFromProto for a profile from outside (a worker's registration, a file):
// INVALID_ARGUMENT naming the field when a bf16_time_ratio that would be read is not in [0.001, 1000],
// or when the result fails DeviceProfile::Validate().
[[nodiscard]] absl::StatusOr<DeviceProfile> CheckedDeviceProfileFromProto(const v1::DeviceProfile& proto);

// Parses a text-format slimfit.v1.DeviceProfile.
// INVALID_ARGUMENT: a syntax error, an unknown field or a value of the wrong type — the message
//   names the 1-based line and column TextFormat reports ("line 3, column 18: ...") —, a string
//   field that is not valid UTF-8 (a worker could not send the profile), or a profile that fails
//   DeviceProfile::Validate() (its message names the field).
[[nodiscard]] absl::StatusOr<DeviceProfile> ParseDeviceProfileText(absl::string_view text);

// The profile as text-format proto, one field per line, every field written, ending in '\n'.
// ParseDeviceProfileText(DeviceProfileToText(p)) returns p exactly (doubles are printed with
// enough digits to round-trip) whenever p is valid.
std::string DeviceProfileToText(const DeviceProfile& profile);

// Reads and parses the file at `path`. NOT_FOUND when it does not exist, PERMISSION_DENIED or
// INTERNAL when it cannot be read, otherwise the errors of ParseDeviceProfileText; every message
// starts with the path.
[[nodiscard]] absl::StatusOr<DeviceProfile> ReadDeviceProfile(const std::string& path);

// Validates `profile` (INVALID_ARGUMENT as DeviceProfile::Validate(); nothing is written then) and
// writes it atomically: the text goes to a temporary file in the same directory, which is flushed
// to disk and renamed over `path`, so a reader sees the old file or the new one, never a part.
// NOT_FOUND when the directory does not exist, PERMISSION_DENIED or INTERNAL for other I/O
// failures (the temporary file is removed); every message names the path.
[[nodiscard]] absl::Status WriteDeviceProfile(const std::string& path, const DeviceProfile& profile);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_DEVICE_PROFILE_IO_H_
