// One CUDA thread block emulated on the host, for testing kernel bodies written against a
// `Threads` parameter (prefix_attention_kernel_bodies.h) on machines without a GPU: `count` host
// threads run the body at once, and Sync() is a barrier all of them must reach, as __syncthreads()
// is on a device. What this checks: indexing, the split of work among threads, and that every read
// of another thread's writes is behind a Sync(). What it cannot: CUDA's launch limits, its memory
// model beyond barriers, or speed.
//
// Thread safety: RunEmulatedThreadBlock blocks until every thread has returned; the body runs on
// `count` threads concurrently and must be safe for that (as a kernel body is).
#ifndef SLIMFIT_PERFORMER_EMULATED_THREAD_BLOCK_H_
#define SLIMFIT_PERFORMER_EMULATED_THREAD_BLOCK_H_

#include <pthread.h>

#include <cstdint>
#include <functional>

namespace slimfit::performer {

// A kernel body's view of its thread in an emulated block.
class EmulatedThreads {
 public:
  EmulatedThreads(int64_t index, int64_t count, pthread_barrier_t* barrier)
      : index_(index), count_(count), barrier_(barrier) {}
  int64_t Index() const { return index_; }
  int64_t Count() const { return count_; }
  void Sync() const { pthread_barrier_wait(barrier_); }

 private:
  int64_t index_;
  int64_t count_;
  pthread_barrier_t* barrier_;
};

// Runs body(threads) on `count` ≥ 1 host threads, each with its Index() in [0, count).
void RunEmulatedThreadBlock(int64_t count, const std::function<void(const EmulatedThreads&)>& body);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_EMULATED_THREAD_BLOCK_H_
