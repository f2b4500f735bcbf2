// Memory accounting for gradient calls.
//
// On CPU, a process-wide tracking allocator wraps LibTorch's CPU allocator: every tensor byte
// allocated after start-up is counted (current and peak), and the peak can be reset so one call's
// high-water mark can be read. It is installed by a static initialiser of this library (linked with
// alwayslink), i.e. before main() and before any tensor exists, so parameters are counted too.
// On CUDA (builds defining SLIMFIT_WITH_CUDA) the same interface reads the caching allocator's
// statistics for the device.
//
// Example:
//   MemoryScope scope(device);           // resets the peak to the current usage
//   ... run a gradient ...
//   int64_t peak = scope.PeakBytes();    // highest tensor bytes seen since the scope began
//
// Thread safety: all functions are safe to call concurrently. The peak is process-wide: two
// concurrent gradient calls on one device see each other's allocations (the worker runs one at a
// time).
#ifndef SLIMFIT_PERFORMER_MEMORY_TRACKER_H_
#define SLIMFIT_PERFORMER_MEMORY_TRACKER_H_

#include <c10/core/Device.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace slimfit::performer {

struct MemoryStats {
  int64_t current_bytes = 0;  // tensor bytes allocated now
  int64_t peak_bytes = 0;     // highest current_bytes since the last reset
};

// True when CPU allocations are being counted (the tracker is installed).
bool CpuTrackingActive();

// Statistics of `device`. UNIMPLEMENTED for CUDA in builds without SLIMFIT_WITH_CUDA;
// INVALID_ARGUMENT for other device types.
absl::StatusOr<MemoryStats> GetMemoryStats(const c10::Device& device);

// The device's memory: physical memory for the CPU (/proc/meminfo), the card's memory for CUDA
// (builds with SLIMFIT_WITH_CUDA and the CUDA runtime linked, SLIMFIT_WITH_CUDART; UNIMPLEMENTED in
// other CUDA builds). Same errors as GetMemoryStats otherwise; INTERNAL when the system does not say.
absl::StatusOr<int64_t> DeviceMemoryBytes(const c10::Device& device);

// Sets the device's peak to its current usage. Same errors as GetMemoryStats.
absl::Status ResetPeakMemory(const c10::Device& device);

// Resets the peak on construction; PeakBytes() reports the peak since then. Errors from the
// device (see GetMemoryStats) are reported by PeakBytes().
class MemoryScope {
 public:
  explicit MemoryScope(const c10::Device& device);
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

  absl::StatusOr<int64_t> PeakBytes() const;

 private:
  c10::Device device_;
  absl::Status reset_status_;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_MEMORY_TRACKER_H_
