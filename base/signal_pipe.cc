#include "base/signal_pipe.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace slimfit::base {
namespace {

// The write end of the installed pipe; -1 when none is installed.
std::atomic<int> installed_write_fd{-1};

extern "C" void OnSignal(int signal_number) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  const int fd = installed_write_fd.load();
  if (fd >= 0) {
    ssize_t ignored = write(fd, &byte, 1);
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SignalPipe>> SignalPipe::Install(const std::vector<int>& signals) {
  for (int signal_number : signals) {
    if (signal_number < 1 || signal_number > 255 || signal_number == SIGKILL || signal_number == SIGSTOP) {
      return absl::InvalidArgumentError(absl::StrCat("cannot handle signal ", signal_number));
    }
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "cannot create the signal pipe");
  fcntl(fds[1], F_SETFL, O_NONBLOCK);  // a full pipe drops a signal rather than block a handler
  int expected = -1;
  if (!installed_write_fd.compare_exchange_strong(expected, fds[1])) {
    close(fds[0]);
    close(fds[1]);
    return absl::FailedPreconditionError("a signal pipe is already installed in this process");
  }
  std::unique_ptr<SignalPipe> pipe(new SignalPipe(fds[0], fds[1], signals));
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal_number : signals) {
    if (sigaction(signal_number, &action, nullptr) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot handle ", SignalName(signal_number)));
    }
  }
  signal(SIGPIPE, SIG_IGN);
  return pipe;
}

SignalPipe::SignalPipe(int read_fd, int write_fd, std::vector<int> signals)
    : read_fd_(read_fd), write_fd_(write_fd), signals_(std::move(signals)) {}

SignalPipe::~SignalPipe() {
  for (int signal_number : signals_) signal(signal_number, SIG_DFL);
  installed_write_fd.store(-1);
  close(read_fd_);
  close(write_fd_);
}

int SignalPipe::Wait() {
  while (!woken_) {
    unsigned char byte = 0;
    const ssize_t n = read(read_fd_, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == 0) {
      woken_ = true;
      break;
    }
    return byte;
  }
  return 0;
}

void SignalPipe::Wake() {
  const unsigned char zero = 0;
  while (write(write_fd_, &zero, 1) < 0 && errno == EINTR) {
  }
}

std::string SignalName(int signal_number) {
  switch (signal_number) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return absl::StrCat("signal ", signal_number);
  }
}

}  // namespace slimfit::base
