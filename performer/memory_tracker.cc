#include "performer/memory_tracker.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#ifdef SLIMFIT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif
#if defined(SLIMFIT_WITH_CUDA) && defined(SLIMFIT_WITH_CUDART)
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

// LibTorch 2.3 made Allocator::allocate non-const and added a pure virtual copy_data; Debian's
// LibTorch is 1.13, the CUDA builds (scripts/cuda/) are 2.x. The tracker compiles against both.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define SLIMFIT_ALLOCATE_CONST
#define SLIMFIT_ALLOCATOR_HAS_COPY_DATA 1
#else
#define SLIMFIT_ALLOCATE_CONST const
#define SLIMFIT_ALLOCATOR_HAS_COPY_DATA 0
#endif

namespace slimfit::performer {
namespace {

// Counts bytes of every CPU allocation and forwards to the allocator it replaced.
//
// LibTorch's raw_allocate()/raw_deallocate() require the DataPtr's context to be the data pointer
// itself and a raw deleter taking that pointer, so each allocation carries a small header in front
// of the data holding its size and how to free the underlying block. The header keeps the 64-byte
// alignment of LibTorch's CPU allocations.
class TrackingCpuAllocator final : public c10::Allocator {
 public:
  explicit TrackingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) SLIMFIT_ALLOCATE_CONST override {
    c10::DataPtr block = inner_->allocate(n + kHeaderBytes);
    const c10::Device device = block.device();
    auto* base = static_cast<char*>(block.get());
    const c10::DeleterFnPtr deleter = block.get_deleter();
    void* context = block.release_context();
    new (base) Header{static_cast<int64_t>(n), deleter, context};
    Count(static_cast<int64_t>(n));
    void* data = base + kHeaderBytes;
    return c10::DataPtr(data, data, &Release, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Release; }

#if SLIMFIT_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  MemoryStats Stats() const {
    return MemoryStats{current_.load(std::memory_order_relaxed), peak_.load(std::memory_order_relaxed)};
  }
  void ResetPeak() { peak_.store(current_.load(std::memory_order_relaxed)); }

  static TrackingCpuAllocator* Instance();

 private:
  struct Header {
    int64_t bytes;
    c10::DeleterFnPtr deleter;
    void* context;
  };
  static constexpr size_t kHeaderBytes = 64;
  static_assert(sizeof(Header) <= kHeaderBytes, "header must fit in front of the data");

  static void Release(void* data) {
    if (data == nullptr) return;
    auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
    Instance()->current_.fetch_sub(header->bytes, std::memory_order_relaxed);
    const c10::DeleterFnPtr deleter = header->deleter;
    void* context = header->context;
    if (deleter != nullptr) deleter(context);
  }

  void Count(int64_t bytes) const {
    const int64_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  c10::Allocator* inner_;
  mutable std::atomic<int64_t> current_{0};
  mutable std::atomic<int64_t> peak_{0};
};

TrackingCpuAllocator* TrackingCpuAllocator::Instance() {
  // Never destroyed: tensors may be freed during static destruction.
  static TrackingCpuAllocator* tracker = [] {
    auto* created = new TrackingCpuAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(created, /*priority=*/100);
    return created;
  }();
  return tracker;
}

// Install before main(), so every tensor of the process is counted.
const bool kInstalled = (TrackingCpuAllocator::Instance(), true);

}  // namespace

bool CpuTrackingActive() { return c10::GetCPUAllocator() == TrackingCpuAllocator::Instance(); }

absl::StatusOr<MemoryStats> GetMemoryStats(const c10::Device& device) {
  if (device.is_cpu()) return TrackingCpuAllocator::Instance()->Stats();
  if (device.is_cuda()) {
#ifdef SLIMFIT_WITH_CUDA
    const int index = device.has_index() ? device.index() : 0;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    constexpr size_t kAggregate = 0;
    return MemoryStats{stats.allocated_bytes[kAggregate].current, stats.allocated_bytes[kAggregate].peak};
#else
    return absl::UnimplementedError(
        "this binary was built without CUDA support: CUDA memory statistics need a build against a "
        "CUDA LibTorch with SLIMFIT_WITH_CUDA defined and c10_cuda linked");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("no memory accounting for device ", device.str()));
}

absl::StatusOr<int64_t> DeviceMemoryBytes(const c10::Device& device) {
  if (device.is_cpu()) {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    int64_t value = 0;
    while (in >> key >> value >> unit) {
      if (key == "MemTotal:") return value * 1024;
    }
    return absl::InternalError("/proc/meminfo has no MemTotal line: the machine's memory is unknown");
  }
  if (device.is_cuda()) {
#if defined(SLIMFIT_WITH_CUDA) && defined(SLIMFIT_WITH_CUDART)
    const c10::cuda::CUDAGuard guard(device.has_index() ? device.index() : 0);
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    if (const cudaError_t error = cudaMemGetInfo(&free_bytes, &total_bytes); error != cudaSuccess) {
      (void)cudaGetLastError();  // clear it, so LibTorch's next check does not report it
      return absl::InternalError(
          absl::StrCat("cudaMemGetInfo on ", device.str(), " failed: ", cudaGetErrorString(error)));
    }
    return static_cast<int64_t>(total_bytes);
#elif defined(SLIMFIT_WITH_CUDA)
    return absl::UnimplementedError(
        "this binary was built without the CUDA runtime linked (SLIMFIT_WITH_CUDART): the card's memory is "
        "unknown");
#endif
  }
  return GetMemoryStats(device).status();
}

absl::Status ResetPeakMemory(const c10::Device& device) {
  if (device.is_cpu()) {
    TrackingCpuAllocator::Instance()->ResetPeak();
    return absl::OkStatus();
  }
  if (device.is_cuda()) {
#ifdef SLIMFIT_WITH_CUDA
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.has_index() ? device.index() : 0);
    return absl::OkStatus();
#endif
  }
  return GetMemoryStats(device).status();
}

MemoryScope::MemoryScope(const c10::Device& device)
    : device_(device), reset_status_(ResetPeakMemory(device)) {}

absl::StatusOr<int64_t> MemoryScope::PeakBytes() const {
  if (!reset_status_.ok()) return reset_status_;
  absl::StatusOr<MemoryStats> stats = GetMemoryStats(device_);
  if (!stats.ok()) return stats.status();
  return stats->peak_bytes;
}

}  // namespace slimfit::performer
