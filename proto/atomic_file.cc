#include "proto/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace slimfit {
namespace {

std::atomic<uint64_t> temp_counter{0};

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  std::string temp_path;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    temp_path = absl::StrCat(path, ".tmp.", getpid(), ".", temp_counter.fetch_add(1));
    fd = open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot create a temporary file beside it"));
  }
  // errno is read before close() and unlink(), which may change it.
  auto fail = [&](int error_number, absl::string_view what) {
    unlink(temp_path.c_str());
    return absl::ErrnoToStatus(error_number, absl::StrCat(path, ": ", what));
  };
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      close(fd);
      return fail(error_number, "cannot write the temporary file");
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const int error_number = errno;
    close(fd);
    return fail(error_number, "cannot flush the temporary file to disk");
  }
  if (close(fd) != 0) return fail(errno, "cannot close the temporary file");
  if (rename(temp_path.c_str(), path.c_str()) != 0) return fail(errno, "cannot rename the temporary file over it");
  // Make the rename durable; a failure here still leaves a complete file in place.
  const int dir_fd = open(DirectoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  return absl::OkStatus();
}

}  // namespace slimfit
