// Thread: every thread a slimfit daemon starts, with an exception boundary around what it runs.
// The body returns an absl::Status; an exception that escapes it (a std::exception — LibTorch's
// c10::Error is one — or anything else) becomes an INTERNAL status naming the thread, where a bare
// std::thread would call std::terminate and end the process. Whoever joins gets the status.
//
// Example:
//   base::Thread liveness("liveness", [this] { return LivenessLoop(); });
//   ...
//   absl::Status ended = liveness.Join();  // the loop's status, or INTERNAL "thread liveness: ..."
//
// ThreadGroup starts several and waits for them together, waking its caller as each one ends (a
// wave of calls, one thread per worker, whose caller also watches the workers while it waits).
//
//   base::ThreadGroup wave;
//   for (...) wave.Start(absl::StrCat("shards to ", id), [&calls, i] { return calls[i].Run(); });
//   while (!wave.WaitForAnEnd(absl::Milliseconds(200))) CancelCallsToGoneWorkers();
//   absl::Status all = wave.JoinAll();  // the first failure, in the order the threads started
//
// Thread safety: Thread's methods may be called from any thread (a Join waits for one in
// progress; moving or assigning a Thread is not synchronised). A ThreadGroup belongs to the thread
// that starts, waits for and joins its threads; only failed() may be called from others. A body
// must not join its own Thread or ThreadGroup (it would wait for itself). Destroying a Thread or ThreadGroup
// joins what is still running; a failure nobody joined is logged then (base/log.h), never lost silently.
#ifndef SLIMFIT_BASE_THREAD_H_
#define SLIMFIT_BASE_THREAD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace slimfit::base {

// Runs `body` on the calling thread; an exception escaping it becomes INTERNAL
// "<what>: uncaught exception: <first line of what()>" (c10::Error's what() goes on with a
// backtrace over many lines: one line keeps logs one line per message). Used by Thread; also for
// code that must not let an exception out on a thread it does not own.
absl::Status CatchExceptions(absl::string_view what, absl::FunctionRef<absl::Status()> body);

class Thread {
 public:
  // Called on the thread, after the body, with its status (a ThreadGroup counts ends with it).
  // Must not throw.
  using OnEnd = std::function<void(const absl::Status&)>;

  // No thread: joinable() is false and Join() FAILED_PRECONDITION.
  Thread() = default;
  // Starts `body` on a new thread. `name` says what it is in statuses, logs and the system's
  // thread name (its first 15 bytes, as top and gdb show them).
  Thread(std::string name, std::function<absl::Status()> body, OnEnd on_end = nullptr);
  // Joins (as Join) if a thread is still running.
  ~Thread();
  Thread(Thread&& other) noexcept = default;
  // Joins this object's thread, if any, before taking `other`'s.
  Thread& operator=(Thread&& other) noexcept;
  Thread(const Thread&) = delete;
  Thread& operator=(const Thread&) = delete;

  // Waits for the thread to end and returns the body's status (INTERNAL for an exception). Idempotent:
  // a later call returns the same status at once. FAILED_PRECONDITION for a Thread that was never
  // started (default-constructed or moved from).
  absl::Status Join();
  // Whether the body has returned (Join then does not wait long).
  bool done() const;
  // Waits until the body has returned or `deadline` passed; whether it has returned.
  bool WaitUntilDone(absl::Time deadline) const;
  // Started and not yet joined.
  bool joinable() const;
  // The thread's id (also after it ended); a default id for a Thread never started.
  std::thread::id id() const;
  const std::string& name() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

class ThreadGroup {
 public:
  ThreadGroup() = default;
  ~ThreadGroup() = default;  // joins every thread still running (Thread's destructor)
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  // Starts `body` on a thread of the group, as Thread does.
  void Start(std::string name, std::function<absl::Status()> body);
  // Waits until a thread ends that had not ended at the previous call (or at Start, for the first),
  // or until `timeout`. Returns whether every thread started so far has ended.
  bool WaitForAnEnd(absl::Duration timeout);
  // Whether a thread has ended with an error (the caller may cancel what the others are doing).
  bool failed() const;
  // Joins every thread: OK when every body returned OK, else the first failure in the order the
  // threads were started (after all have ended).
  absl::Status JoinAll();

 private:
  mutable absl::Mutex mutex_;  // the threads' ends, counted on the threads (Thread::OnEnd)
  int64_t ended_ ABSL_GUARDED_BY(mutex_) = 0;
  bool failed_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t seen_ = 0;             // ends WaitForAnEnd has seen; the owner's thread only
  std::vector<Thread> threads_;  // the owner's thread only; last: joined before the above go
};

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_THREAD_H_
