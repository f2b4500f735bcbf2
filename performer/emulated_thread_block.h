// One CUDA thread block emulated on the host, for kernel bodies written against a `Threads`
// parameter (prefix_attention_kernel_bodies.h, layer_kernels_cuda_kernels.h) on machines without a
// GPU: `count` host threads run the body, and Sync() is a barrier all of them must reach, as
// __syncthreads() is on a device.
//
// Three schedules:
//  - kConcurrent: the threads run freely between barriers (what the engine's emulated mode uses);
//  - kInOrder and kReverseOrder: one thread at a time — thread 0 (or count − 1) runs until its next
//    Sync(), then the next thread, and so on; when the last has reached the barrier the first runs on.
//    Deterministic: a read of another thread's write that is not behind a Sync() misses the write in
//    at least one of the two orders (when the two run in the same phase as different threads), so
//    comparing both with a reference catches a missing sync reliably, where free-running threads
//    catch it only when the timing happens to expose it.
// What this checks: indexing, the split of work among threads, the placement of every sync. What it
// cannot: CUDA's launch limits, its memory model beyond barriers, or speed.
//
// Thread safety: RunEmulatedThreadBlock returns when every thread has; the body runs on `count`
// threads (concurrently, or taking turns) and must be safe for that, as a kernel body is. A body that
// throws terminates the process (as a trapped kernel ends a CUDA context).
#ifndef SLIMFIT_PERFORMER_EMULATED_THREAD_BLOCK_H_
#define SLIMFIT_PERFORMER_EMULATED_THREAD_BLOCK_H_

#include <cstdint>
#include <functional>

namespace slimfit::performer {

enum class EmulatedSchedule { kConcurrent, kInOrder, kReverseOrder };

class EmulatedBarrier;  // emulated_thread_block.cc

// A kernel body's view of its thread in an emulated block.
class EmulatedThreads {
 public:
  EmulatedThreads(int64_t index, int64_t count, EmulatedBarrier* barrier)
      : index_(index), count_(count), barrier_(barrier) {}
  int64_t Index() const { return index_; }
  int64_t Count() const { return count_; }
  void Sync() const;

 private:
  int64_t index_;
  int64_t count_;
  EmulatedBarrier* barrier_;
};

// Runs body(threads) on `count` host threads (1 to 1,024), each with its Index() in [0, count).
void RunEmulatedThreadBlock(int64_t count, const std::function<void(const EmulatedThreads&)>& body,
                            EmulatedSchedule schedule = EmulatedSchedule::kConcurrent);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_EMULATED_THREAD_BLOCK_H_
