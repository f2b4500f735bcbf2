// DedicatedThread: one thread of its own that runs the callables handed to it, one at a time, each
// caller blocking until its callable has run. For work that must always happen on the same thread
// whichever thread asks for it — slimfit-worker runs every shard on one (gRPC hands each call to
// whichever of its threads is free): glibc's malloc gives each thread an arena of its own and keeps
// freed memory in it, so shards on many threads kept many high-water marks resident
// (BENCHMARKS.md, "Where do a 100M model's round time and coordinator memory go?").
//
// Example:
//   base::DedicatedThread compute;
//   absl::Status status;
//   compute.Run([&] { status = RunShard(...); });  // on compute's thread; returns when done
//
// Preconditions: the callable should not throw (it runs on another thread: wrap it and turn what
// it throws into a status of its own); one that does is logged as an error and Run returns as if
// it had finished. It must not call Run on the same DedicatedThread (it would wait for itself).
// Thread safety: Run may be called from any number of threads; calls run one after another, in
// the order they took the lock. The destructor waits for the callable running, if any, and joins.
#ifndef SLIMFIT_BASE_DEDICATED_THREAD_H_
#define SLIMFIT_BASE_DEDICATED_THREAD_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/thread.h"

namespace slimfit::base {

class DedicatedThread {
 public:
  DedicatedThread();
  ~DedicatedThread();
  DedicatedThread(const DedicatedThread&) = delete;
  DedicatedThread& operator=(const DedicatedThread&) = delete;

  // Runs `work` on this object's thread and returns when it has finished.
  void Run(absl::FunctionRef<void()> work);

  std::thread::id id() const { return thread_.id(); }

 private:
  absl::Status Loop();

  absl::Mutex callers_;  // one Run at a time
  absl::Mutex mutex_;
  absl::FunctionRef<void()>* work_ ABSL_GUARDED_BY(mutex_) = nullptr;  // the Run in progress
  bool done_ ABSL_GUARDED_BY(mutex_) = false;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  Thread thread_;  // last: started once the members above exist
};

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_DEDICATED_THREAD_H_
