// Signals as ordinary reads, for daemons: the handler only writes the signal's number to a pipe
// (async-signal-safe), and a thread of the daemon's own reads it with Wait() and acts (drain, shut
// down, reload). Blocking the signals and sigwait-ing would not do: libraries such as OpenBLAS start
// threads before main, and a signal delivered to one of them would kill the process.
//
// Example:
//   absl::StatusOr<std::unique_ptr<SignalPipe>> signals = SignalPipe::Install({SIGTERM, SIGINT, SIGHUP});
//   if (!signals.ok()) return signals.status();
//   std::thread watcher([&] {
//     for (int s; (s = (*signals)->Wait()) != 0;) {
//       if (s == SIGHUP) Reload(); else Shutdown();
//     }
//   });
//   ...
//   (*signals)->Wake();  // Wait() returns 0: the watcher ends
//   watcher.join();
//
// Installing also ignores SIGPIPE (a peer closing a socket must not end a daemon).
//
// Thread safety: one SignalPipe per process at a time (the handlers are process-wide). Wait() is
// called by one thread; Wake() by any thread, and from signal handlers.
#ifndef SLIMFIT_BASE_SIGNAL_PIPE_H_
#define SLIMFIT_BASE_SIGNAL_PIPE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace slimfit::base {

class SignalPipe {
 public:
  // Creates the pipe and installs the handler for every signal in `signals` (numbers 1..255).
  // FAILED_PRECONDITION when another SignalPipe is installed; the errno's code when the pipe or a
  // handler cannot be set up; INVALID_ARGUMENT for a signal number out of range.
  static absl::StatusOr<std::unique_ptr<SignalPipe>> Install(const std::vector<int>& signals);

  // Restores the default dispositions of the signals and closes the pipe. REQUIRES: no thread is
  // in Wait() (call Wake() and join it first).
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Blocks until a signal arrives (returns its number; signals that arrive together are returned
  // one per call, in order) or Wake() is called (returns 0, and keeps returning 0).
  int Wait();
  // Makes Wait() return 0.
  void Wake();

 private:
  SignalPipe(int read_fd, int write_fd, std::vector<int> signals);

  const int read_fd_;
  const int write_fd_;
  const std::vector<int> signals_;
  bool woken_ = false;  // Wait()'s thread only
};

// "SIGTERM", "SIGINT", "SIGHUP", ... ("signal N" for others).
std::string SignalName(int signal_number);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_SIGNAL_PIPE_H_
