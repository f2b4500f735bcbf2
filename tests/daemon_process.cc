#include "tests/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/test_util.h"

namespace slimfit::testing_util {
namespace {

std::vector<char*> Argv(const std::string& binary, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  return argv;
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

absl::StatusOr<DaemonProcess> DaemonProcess::Start(const std::string& binary,
                                                   const std::vector<std::string>& args,
                                                   const std::string& log_path) {
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path, ": ", std::strerror(errno)));
  std::vector<char*> argv = Argv(binary, args);
  const pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    close(log);
    execv(binary.c_str(), argv.data());
    std::fprintf(stderr, "execv %s: %s\n", binary.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(log);
  return DaemonProcess(pid, log_path);
}

DaemonProcess::DaemonProcess(DaemonProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      exit_status_(other.exit_status_),
      log_path_(std::move(other.log_path_)) {}

DaemonProcess& DaemonProcess::operator=(DaemonProcess&& other) noexcept {
  if (this != &other) {
    this->~DaemonProcess();
    pid_ = std::exchange(other.pid_, -1);
    exit_status_ = other.exit_status_;
    log_path_ = std::move(other.log_path_);
  }
  return *this;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0 && exit_status_ < 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  pid_ = -1;
}

bool DaemonProcess::running() {
  if (exit_status_ >= 0) return false;
  int status = 0;
  const pid_t done = waitpid(pid_, &status, WNOHANG);
  if (done == pid_) {
    exit_status_ = DecodeStatus(status);
    return false;
  }
  return true;
}

absl::StatusOr<std::string> DaemonProcess::WaitForAddress(const std::string& port_file,
                                                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(port_file);
    std::string address;
    if (in && std::getline(in, address) && !address.empty())
      return std::string(absl::StripAsciiWhitespace(address));
    if (!running()) {
      absl::StatusOr<std::string> log = base::ReadFileToString(log_path_);
      return absl::FailedPreconditionError(absl::StrCat("daemon exited with status ", exit_status_,
                                                        " before serving; log:\n", log.ok() ? *log : ""));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no address in ", port_file, " after ", absl::FormatDuration(timeout)));
}

void DaemonProcess::Signal(int signal) {
  if (pid_ > 0 && exit_status_ < 0) kill(pid_, signal);
}

absl::StatusOr<int> DaemonProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (running()) {
    if (absl::Now() > deadline) return absl::DeadlineExceededError("process still running");
    absl::SleepFor(absl::Milliseconds(20));
  }
  return exit_status_;
}

absl::StatusOr<CommandResult> RunCommand(const std::string& binary, const std::vector<std::string>& args,
                                         absl::Duration timeout) {
  const std::string out_path = TempPath(absl::StrCat("command-", getpid(), "-", rand(), ".out"));
  const std::string err_path = out_path + ".err";
  std::vector<char*> argv = Argv(binary, args);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return absl::DeadlineExceededError(
          absl::StrCat(binary, " did not finish in ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  CommandResult result;
  result.exit_status = DecodeStatus(status);
  absl::StatusOr<std::string> out = base::ReadFileToString(out_path);
  absl::StatusOr<std::string> err = base::ReadFileToString(err_path);
  result.out = out.ok() ? *out : "";
  result.err = err.ok() ? *err : "";
  return result;
}

}  // namespace slimfit::testing_util
