#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace slimfit::base {
namespace {

std::atomic<uint64_t> temp_counter{0};

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status ReadFileInChunks(const std::string& path, size_t chunk_bytes,
                              const std::function<void(absl::string_view)>& consume) {
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error_number = errno;
    close(fd);
    return absl::ErrnoToStatus(error_number, absl::StrCat(path, ": cannot stat"));
  }
  if (!S_ISREG(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::vector<char> buffer(std::max<size_t>(1, chunk_bytes));
  while (true) {
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      close(fd);
      return absl::ErrnoToStatus(error_number, absl::StrCat(path, ": cannot read"));
    }
    if (n == 0) break;
    consume(absl::string_view(buffer.data(), static_cast<size_t>(n)));
  }
  close(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::string contents;
  absl::Status read = ReadFileInChunks(
      path, size_t{1} << 16, [&](absl::string_view piece) { contents.append(piece.data(), piece.size()); });
  if (!read.ok()) return read;
  return contents;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status appended = writer->Append(contents); !appended.ok()) return appended;
  return writer->Commit();
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(std::string path, mode_t mode) {
  std::string temp_path;
  int fd = -1;
  // pid + counter makes names unique among live writers; O_EXCL plus retries skips leftovers of
  // crashed processes that had the same pid.
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    temp_path = absl::StrCat(path, ".tmp.", getpid(), ".", temp_counter.fetch_add(1));
    fd = open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot create a temporary file beside it"));
  }
  return AtomicFileWriter(std::move(path), std::move(temp_path), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(temp_path_.c_str());
  }
}

absl::Status AtomicFileWriter::Abandon(int error_number, absl::string_view what) {
  // errno is read by the caller before close() and unlink(), which may change it.
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  unlink(temp_path_.c_str());
  return absl::ErrnoToStatus(error_number, absl::StrCat(path_, ": ", what));
}

absl::Status AtomicFileWriter::Append(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": the writer is closed"));
  while (!bytes.empty()) {
    const ssize_t n = write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Abandon(errno, "cannot write the temporary file");
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": the writer is closed"));
  if (fsync(fd_) != 0) return Abandon(errno, "cannot flush the temporary file to disk");
  const int closing = std::exchange(fd_, -1);
  if (close(closing) != 0) {
    const int error_number = errno;
    unlink(temp_path_.c_str());
    return absl::ErrnoToStatus(error_number, absl::StrCat(path_, ": cannot close the temporary file"));
  }
  if (rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int error_number = errno;
    unlink(temp_path_.c_str());
    return absl::ErrnoToStatus(error_number,
                               absl::StrCat(path_, ": cannot rename the temporary file over it"));
  }
  // Make the rename durable. Some file systems cannot fsync a directory (EINVAL); a failure here
  // still leaves a complete file in place.
  const int dir_fd = open(DirectoryOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  return absl::OkStatus();
}

}  // namespace slimfit::base
