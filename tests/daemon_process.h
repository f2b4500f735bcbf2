// Real daemons for end-to-end tests: starts a binary (a runfile) as a child process with its
// stdout and stderr appended to a log file, waits for the address it writes to --port_file, sends
// signals and reaps it. The destructor kills (SIGKILL) and reaps a process still running, so a
// failing test leaves nothing behind.
//
// Test-only. Thread safety: one DaemonProcess per thread.
#ifndef SLIMFIT_TESTS_DAEMON_PROCESS_H_
#define SLIMFIT_TESTS_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace slimfit::testing_util {

class DaemonProcess {
 public:
  // Starts `binary` with `args`; output goes to `log_path`.
  static absl::StatusOr<DaemonProcess> Start(const std::string& binary, const std::vector<std::string>& args,
                                             const std::string& log_path);
  DaemonProcess(DaemonProcess&& other) noexcept;
  DaemonProcess& operator=(DaemonProcess&& other) noexcept;
  ~DaemonProcess();

  // Waits until `port_file` holds an address (the daemon is serving) or the process exits.
  absl::StatusOr<std::string> WaitForAddress(const std::string& port_file, absl::Duration timeout);

  void Signal(int signal);
  // Waits for the exit; returns the exit status (128 + signal for a signalled process), or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  bool running();
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

 private:
  DaemonProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_ = -1;
  int exit_status_ = -1;
  std::string log_path_;
};

// Runs a binary to completion: its exit status, with stdout and stderr captured separately.
struct CommandResult {
  int exit_status = -1;
  std::string out;
  std::string err;
};
absl::StatusOr<CommandResult> RunCommand(const std::string& binary, const std::vector<std::string>& args,
                                         absl::Duration timeout);

}  // namespace slimfit::testing_util

#endif  // SLIMFIT_TESTS_DAEMON_PROCESS_H_
