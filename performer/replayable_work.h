// Device work recorded once and launched again as a whole: CUDA graphs for LibTorch code whose
// shapes repeat.
//
// A slice of the sliced gradient is a few hundred small kernels, the same ones from slice to slice;
// on a GPU, issuing them one LibTorch call at a time costs more host time than the device spends on
// them (BENCHMARKS.md, "On a GPU"). A ReplayableWork captures one run of a closure (the "body")
// into a CUDA graph and afterwards launches the whole graph with one call.
//
// The body's contract (what makes a replay equal to running it again):
//  - it reads tensors that exist before the first Run and keep their storage (static inputs the
//    caller refills with copy_, parameters), and writes its results into such tensors in place
//    (copy_, add_, index_add_, …);
//  - it does the same device work every time: no host decision that depends on tensor values, no
//    read of a device value on the host (.item(), printing), no host-side effect the caller relies on
//    after a replay (host code runs at the capture only);
//  - the tensors it allocates are scratch, dead when it returns (they live in the graph's private
//    memory pool, which replays reuse).
//
// Run's phases (as PyTorch's recipe for graphs with autograd): the first Run warms up — it calls the
// body directly, on the stream captures will use, so LibTorch's lazy initialisation (the autograd
// engine's threads, cuBLAS workspaces, gradient buffers) happens outside a capture; the second
// captures the body and launches the graph; later ones launch it.
//
// Modes:
//  - kCudaGraph (builds with SLIMFIT_WITH_CUDA_GRAPHS, CUDA devices): as above, on a side stream
//    ordered after and before the caller's current stream by events.
//  - kRerun: every Run calls the body. Same contract and phases, no capture: the tests use it on the
//    CPU to check a caller's static-buffer plumbing, which a capture would replay.
//
// Memory: a captured graph keeps its private pool's device memory (pool_bytes()) until it is
// destroyed; graphs created with the same `pool_owner` share one pool, which is safe because the
// body's allocations are all dead when it returns. pool_bytes() is what the pool grew by during
// this object's capture: the pool's size is the sum over the graphs sharing it.
//
// Thread safety: one thread. Every ReplayableWork of a device warms up and captures on the same side
// stream, so graph work on one device must come from one thread at a time; and a capture must not
// run while another thread issues work to the device.
#ifndef SLIMFIT_PERFORMER_REPLAYABLE_WORK_H_
#define SLIMFIT_PERFORMER_REPLAYABLE_WORK_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace slimfit::performer {

class ReplayableWork {
 public:
  enum class Mode { kCudaGraph, kRerun };

  // Whether this binary can capture CUDA graphs (a CUDA LibTorch build with
  // SLIMFIT_WITH_CUDA_GRAPHS: scripts/cuda/).
  static bool CudaGraphsBuilt();

  // REQUIRES for kCudaGraph: CudaGraphsBuilt() and a CUDA `device`; `pool_owner` (optional) a
  // kCudaGraph ReplayableWork of the same device whose private pool this one shares (it lends the
  // pool's id; the pool lives while any graph of it does).
  ReplayableWork(Mode mode, const at::Device& device, const ReplayableWork* pool_owner = nullptr);
  ~ReplayableWork();
  ReplayableWork(const ReplayableWork&) = delete;
  ReplayableWork& operator=(const ReplayableWork&) = delete;

  enum class Phase { kWarmUp, kCapture, kReplay };
  // What the next Run does.
  Phase next_phase() const;

  // Runs the body's device work (see the contract and phases above). When a capture fails, Run
  // ends the capture and rethrows what the body threw (LibTorch's c10::Error): nothing of the body
  // has run on the device then, so the caller may call the body directly instead (a Run that
  // throws does not count: the next one is of the same phase).
  void Run(const std::function<void()>& body);

  // Where a capture made to fail (FailCapturesForTesting) fails.
  enum class InjectedFailure {
    // Before anything of the body runs (either mode): a c10::Error from Run itself.
    kBeforeBody,
    // kCudaGraph: after the body's host code has run inside the capture, by a read of a device
    // value on the host — a real CUDA capture failure, which CUDA reports and which leaves the
    // capture broken as any illegal call in a body would; nothing of the body runs on the device.
    // kRerun: as kBeforeBody (a body run directly cannot fail after it without having run).
    kInsideCapture,
  };
  // Makes the next `count` capture-phase Runs in this process fail at `where`, as a failed capture
  // does: how tests reach their callers' fallback, which no well-formed body can be made to take on
  // purpose. Thread safety: atomic.
  static void FailCapturesForTesting(int count, InjectedFailure where = InjectedFailure::kBeforeBody);

  Mode mode() const { return mode_; }
  bool captured() const;
  // Device bytes the (shared) private pool grew by during this object's capture; 0 without one.
  int64_t pool_bytes() const;

 private:
  struct CudaGraphState;

  const Mode mode_;
  const at::Device device_;
  int64_t runs_ = 0;
  std::unique_ptr<CudaGraphState> graph_;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_REPLAYABLE_WORK_H_
