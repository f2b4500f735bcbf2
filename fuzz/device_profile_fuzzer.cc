// Fuzz target: device profiles as text-format protos (planner/device_profile_io.h), the files
// `slimfit calibrate --out` writes and `slimfit plan --profile`, `slimfit-worker --profile` and a
// worker's state directory read.
//
// Invariants: a refusal is INVALID_ARGUMENT; an accepted profile is valid, prints
// (DeviceProfileToText) as text that parses back to exactly the same profile, and can be sent: its
// message serialises to bytes a receiver parses back to the same profile.
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_support.h"
#include "planner/device_profile_io.h"

namespace slimfit::fuzz {
namespace {

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool SameProfile(const planner::DeviceProfile& a, const planner::DeviceProfile& b) {
  return a.device == b.device && a.device_name == b.device_name && a.threads == b.threads &&
         a.total_memory_bytes == b.total_memory_bytes && SameBits(a.activation_scale, b.activation_scale) &&
         a.activation_overhead_bytes == b.activation_overhead_bytes &&
         a.resident_overhead_bytes == b.resident_overhead_bytes &&
         a.forward_weight_copies == b.forward_weight_copies && a.replays_slices == b.replays_slices &&
         a.graph_pool_overhead_bytes == b.graph_pool_overhead_bytes &&
         SameBits(a.flops_per_second, b.flops_per_second) && SameBits(a.half_rate_rows, b.half_rate_rows) &&
         SameBits(a.seconds_per_element, b.seconds_per_element) &&
         SameBits(a.layer_overhead_s, b.layer_overhead_s) && SameBits(a.backward_factor, b.backward_factor) &&
         SameBits(a.bf16_flops_per_second, b.bf16_flops_per_second) &&
         SameBits(a.bf16_half_rate_rows, b.bf16_half_rate_rows) &&
         SameBits(a.bf16_layer_overhead_s, b.bf16_layer_overhead_s);
}

}  // namespace
}  // namespace slimfit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace slimfit;  // NOLINT
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<planner::DeviceProfile> profile = planner::ParseDeviceProfileText(text);
  if (!profile.ok()) {
    SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(profile.status()), profile.status().ToString());
    return 0;
  }
  SLIMFIT_FUZZ_CHECK(profile->Validate().ok(), profile->Validate().ToString());
  const std::string printed = planner::DeviceProfileToText(*profile);
  absl::StatusOr<planner::DeviceProfile> reparsed = planner::ParseDeviceProfileText(printed);
  SLIMFIT_FUZZ_CHECK(reparsed.ok(), "printed profile does not parse: ", reparsed.status().ToString(), "\n",
                     printed);
  SLIMFIT_FUZZ_CHECK(fuzz::SameProfile(*profile, *reparsed), "printed profile parses differently:\n",
                     printed);
  // A worker sends its profile in RegisterWorkerRequest: the coordinator must be able to parse it.
  v1::DeviceProfile received;
  SLIMFIT_FUZZ_CHECK(received.ParseFromString(planner::DeviceProfileToProto(*profile).SerializeAsString()),
                     "an accepted profile cannot be sent: its receiver cannot parse it");
  SLIMFIT_FUZZ_CHECK(fuzz::SameProfile(*profile, planner::DeviceProfileFromProto(received)),
                     "proto conversion");
  return 0;
}
