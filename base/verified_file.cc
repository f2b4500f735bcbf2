#include "base/verified_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"

namespace slimfit::base {

absl::Status StreamVerifiedFile(const std::string& path, const FileDigest& expected, size_t chunk_bytes,
                                const std::function<bool(absl::string_view)>& consume) {
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT) return absl::DataLossError(absl::StrCat(path, ": the file is missing"));
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  }
  absl::Cleanup closer = [fd] { close(fd); };
  struct stat info;
  if (fstat(fd, &info) != 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot stat"));
  if (!S_ISREG(info.st_mode)) return absl::DataLossError(absl::StrCat(path, ": not a regular file"));
  if (expected.bytes >= 0 && static_cast<int64_t>(info.st_size) != expected.bytes) {
    return absl::DataLossError(absl::StrCat(path, ": the file has ", static_cast<int64_t>(info.st_size),
                                            " bytes; ", expected.bytes, " were written"));
  }
  Sha256Hasher hasher;
  int64_t read_bytes = 0;
  std::vector<char> buffer(std::max<size_t>(1, chunk_bytes));
  while (true) {
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));
    }
    if (n == 0) break;
    const absl::string_view piece(buffer.data(), static_cast<size_t>(n));
    hasher.Update(piece);
    read_bytes += n;
    if (!consume(piece)) return absl::CancelledError(absl::StrCat(path, ": reading it was stopped"));
  }
  // The size may change while it is read (a file rewritten in place): the hash decides.
  const std::string digest = hasher.FinishHex();
  if (digest != expected.sha256) {
    return absl::DataLossError(absl::StrCat(path, ": the SHA-256 of its ", read_bytes, " bytes is ", digest,
                                            "; ", expected.sha256, " was recorded when it was written"));
  }
  return absl::OkStatus();
}

absl::Status VerifyFile(const std::string& path, const FileDigest& expected) {
  return StreamVerifiedFile(path, expected, size_t{1} << 20, [](absl::string_view) { return true; });
}

}  // namespace slimfit::base
