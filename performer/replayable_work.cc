#include "performer/replayable_work.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <map>
#include <mutex>

#if defined(SLIMFIT_WITH_CUDA) && defined(SLIMFIT_WITH_CUDA_GRAPHS)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#define SLIMFIT_CUDA_GRAPHS_ENABLED 1
#endif

namespace slimfit::performer {

#ifdef SLIMFIT_CUDA_GRAPHS_ENABLED
namespace {

// One side stream per device for every warm-up and capture in the process. LibTorch gives each
// stream its own cuBLAS workspace and keeps it for the life of the process, so a stream per graph
// would leave one workspace behind per graph (tens of MiB each on a Hopper card).
c10::cuda::CUDAStream SideStream(c10::DeviceIndex index) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream>* streams =
      new std::map<c10::DeviceIndex, c10::cuda::CUDAStream>();  // never destroyed: used until exit
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = streams->find(index);
  if (it == streams->end()) {
    it = streams->emplace(index, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)).first;
  }
  return it->second;
}

}  // namespace

struct ReplayableWork::CudaGraphState {
  explicit CudaGraphState(c10::DeviceIndex device) : index(device), side(SideStream(device)) {}

  // Runs `work` on the side stream, ordered after what the caller's current stream has issued;
  // the caller's stream waits for what `work` issues.
  template <typename Work>
  void OnSideStream(Work&& work) {
    // c10::Event rather than ATen's CUDAEvent: no CUDA runtime call in this file, so the build
    // links only LibTorch's libraries.
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(index);
    c10::Event before(c10::DeviceType::CUDA);
    before.record(caller);
    before.block(side);
    // The caller's stream waits for the side stream also when `work` throws (out of memory halfway
    // through a warm-up, say): the caller frees what it gave `work` on its own stream, which must
    // not happen while side-stream kernels still read it.
    struct JoinCaller {
      ~JoinCaller() {
        try {
          c10::Event after(c10::DeviceType::CUDA);
          after.record(side);
          after.block(caller);
        } catch (...) {
          // Nothing better to do in a destructor; the device error resurfaces at the next call.
        }
      }
      const c10::cuda::CUDAStream& side;
      const c10::cuda::CUDAStream& caller;
    } join{side, caller};
    const c10::cuda::CUDAStreamGuard stream_guard(side);
    work();
  }

  const c10::DeviceIndex index;
  const c10::cuda::CUDAStream side;  // warm-up and capture
  at::cuda::CUDAGraph graph;
  decltype(at::cuda::graph_pool_handle()) pool;  // shared with the pool owner's graph
  bool captured = false;
  int64_t pool_bytes = 0;
};

namespace {
int64_t ReservedBytes(c10::DeviceIndex index) {
  constexpr size_t kAggregate = 0;  // StatType::AGGREGATE
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index).reserved_bytes[kAggregate].current;
}
}  // namespace
#else
struct ReplayableWork::CudaGraphState {};
#endif

namespace {
std::atomic<int> captures_to_fail{0};
std::atomic<ReplayableWork::InjectedFailure> injected_failure{ReplayableWork::InjectedFailure::kBeforeBody};
}  // namespace

void ReplayableWork::FailCapturesForTesting(int count, InjectedFailure where) {
  injected_failure.store(where);
  captures_to_fail.store(count);
}

bool ReplayableWork::CudaGraphsBuilt() {
#ifdef SLIMFIT_CUDA_GRAPHS_ENABLED
  return true;
#else
  return false;
#endif
}

ReplayableWork::ReplayableWork(Mode mode, const at::Device& device, const ReplayableWork* pool_owner)
    : mode_(mode), device_(device) {
  if (mode_ == Mode::kRerun) return;
  TORCH_CHECK(CudaGraphsBuilt(), "ReplayableWork: this binary was built without CUDA graphs");
  TORCH_CHECK(device_.is_cuda(), "ReplayableWork: CUDA graphs need a CUDA device, not ", device_.str());
#ifdef SLIMFIT_CUDA_GRAPHS_ENABLED
  graph_ =
      std::make_unique<CudaGraphState>(device_.has_index() ? device_.index() : c10::cuda::current_device());
  if (pool_owner != nullptr) {
    TORCH_CHECK(pool_owner->graph_ != nullptr, "ReplayableWork: the pool owner captures no graph");
    graph_->pool = pool_owner->graph_->pool;
  } else {
    graph_->pool = at::cuda::graph_pool_handle();
  }
#endif
}

ReplayableWork::~ReplayableWork() = default;

bool ReplayableWork::captured() const {
#ifdef SLIMFIT_CUDA_GRAPHS_ENABLED
  return graph_ != nullptr && graph_->captured;
#else
  return false;
#endif
}

int64_t ReplayableWork::pool_bytes() const {
#ifdef SLIMFIT_CUDA_GRAPHS_ENABLED
  return graph_ != nullptr ? graph_->pool_bytes : 0;
#else
  return 0;
#endif
}

ReplayableWork::Phase ReplayableWork::next_phase() const {
  if (runs_ == 0) return Phase::kWarmUp;
  return runs_ == 1 ? Phase::kCapture : Phase::kReplay;
}

void ReplayableWork::Run(const std::function<void()>& body) {
  const Phase phase = next_phase();
  bool break_capture = false;  // fail inside the capture, after the body (kInsideCapture)
  if (phase == Phase::kCapture) {
    int left = captures_to_fail.load();
    while (left > 0 && !captures_to_fail.compare_exchange_weak(left, left - 1)) {
    }
    break_capture =
        left > 0 && mode_ == Mode::kCudaGraph && injected_failure.load() == InjectedFailure::kInsideCapture;
    TORCH_CHECK(left <= 0 || break_capture,
                "ReplayableWork: capture failed on purpose (FailCapturesForTesting)");
  }
  if (mode_ == Mode::kRerun) {
    body();
    ++runs_;
    return;
  }
#ifdef SLIMFIT_CUDA_GRAPHS_ENABLED
  CudaGraphState& g = *graph_;
  const c10::cuda::CUDAGuard device_guard(g.index);
  if (phase == Phase::kWarmUp) {
    g.OnSideStream(body);
    ++runs_;
    return;
  }
  if (phase == Phase::kCapture) {
    const int64_t reserved_before = ReservedBytes(g.index);
    // The capture itself runs nothing on the device; the events only order the side stream.
    g.OnSideStream([&] {
      g.graph.capture_begin(g.pool);
      try {
        body();
        if (break_capture) {
          // FailCapturesForTesting(kInsideCapture): a host read, which CUDA refuses in a capture.
          (void)at::zeros({1}, at::TensorOptions().device(device_)).item<float>();
          TORCH_CHECK(false,
                      "ReplayableWork: a host read inside a capture did not fail (FailCapturesForTesting)");
        }
      } catch (...) {
        try {
          g.graph.capture_end();
        } catch (...) {
          // The capture is already broken; the body's own error is the one to report.
        }
        throw;
      }
      g.graph.capture_end();
    });
    g.pool_bytes = ReservedBytes(g.index) - reserved_before;
    g.captured = true;
  }
  g.graph.replay();  // on the caller's current stream, after what it issued before
  ++runs_;
#else
  (void)phase;
  TORCH_CHECK(false, "ReplayableWork: this binary was built without CUDA graphs");
#endif
}

}  // namespace slimfit::performer
