#include "performer/emulated_thread_block.h"

#include <c10/util/Exception.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace slimfit::performer {

// A barrier for `count` threads that, in the ordered schedules, also passes a turn: only the thread
// whose turn it is runs; arriving at the barrier (or finishing) hands the turn on.
class EmulatedBarrier {
 public:
  EmulatedBarrier(int64_t count, EmulatedSchedule schedule) : count_(count), schedule_(schedule) {}

  // Blocks a thread of an ordered schedule until its first turn.
  void Start(int64_t index) {
    if (schedule_ == EmulatedSchedule::kConcurrent) return;
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return turn_ == Position(index); });
  }

  void Wait(int64_t index) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t generation = generation_;
    if (++arrived_ == count_) {  // the last to arrive opens the barrier
      arrived_ = 0;
      ++generation_;
      turn_ = 0;
      changed_.notify_all();
    } else {
      if (schedule_ != EmulatedSchedule::kConcurrent) {
        ++turn_;
        changed_.notify_all();
      }
      changed_.wait(lock, [&] { return generation_ != generation; });
    }
    if (schedule_ != EmulatedSchedule::kConcurrent) {
      changed_.wait(lock, [&] { return turn_ == Position(index); });
    }
  }

  // A thread of an ordered schedule is done: the next one runs.
  void Finish() {
    if (schedule_ == EmulatedSchedule::kConcurrent) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    ++turn_;
    changed_.notify_all();
  }

 private:
  // The thread's place in the order of turns.
  int64_t Position(int64_t index) const {
    return schedule_ == EmulatedSchedule::kReverseOrder ? count_ - 1 - index : index;
  }

  const int64_t count_;
  const EmulatedSchedule schedule_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t arrived_ = 0;
  int64_t generation_ = 0;
  int64_t turn_ = 0;  // the position whose turn it is (ordered schedules)
};

void EmulatedThreads::Sync() const { barrier_->Wait(index_); }

void RunEmulatedThreadBlock(int64_t count, const std::function<void(const EmulatedThreads&)>& body,
                            EmulatedSchedule schedule) {
  TORCH_CHECK(count >= 1 && count <= 1024, "emulated thread block: 1 to 1024 threads, not ", count);
  EmulatedBarrier barrier(count, schedule);
  std::vector<std::thread> threads;
  threads.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    threads.emplace_back([&body, &barrier, i, count] {
      barrier.Start(i);
      body(EmulatedThreads(i, count, &barrier));
      barrier.Finish();
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace slimfit::performer
