#include "base/file_backed_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace slimfit::base {
namespace {

// An unnamed file in `directory`, opened for reading and writing: O_TMPFILE where the file system
// has it, else a fresh name removed at once. -1 with errno set on failure.
int OpenUnnamedFile(const std::string& directory) {
  const int fd = open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  std::string name = directory + "/.slimfit-state-XXXXXX";
  std::vector<char> buffer(name.begin(), name.end());
  buffer.push_back('\0');
  const int named = mkostemp(buffer.data(), O_CLOEXEC);
  if (named < 0) return -1;
  unlink(buffer.data());
  return named;
}

}  // namespace

bool IsInMemoryFileSystem(const std::string& directory) {
  struct statfs info;
  if (statfs(directory.c_str(), &info) != 0) return false;
  constexpr int64_t kTmpfs = 0x01021994, kRamfs = 0x858458f6;  // linux/magic.h
  const auto type = static_cast<int64_t>(info.f_type);
  return type == kTmpfs || type == kRamfs;
}

absl::StatusOr<std::unique_ptr<FileBackedMemory>> FileBackedMemory::Create(const std::string& directory,
                                                                           int64_t bytes) {
  if (bytes < 1) return absl::InvalidArgumentError(absl::StrCat("file-backed memory of ", bytes, " bytes"));
  const int fd = OpenUnnamedFile(directory);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat(directory, ": cannot create a file for file-backed memory"));
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (static_cast<size_t>(bytes) + page - 1) / page * page;
  // posix_fallocate returns the error number instead of setting errno.
  if (const int error = posix_fallocate(fd, 0, static_cast<off_t>(mapped)); error != 0) {
    close(fd);
    return absl::ErrnoToStatus(
        error, absl::StrCat(directory, ": cannot allocate ", bytes, " bytes of file-backed memory"));
  }
  void* data = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_error = errno;
  close(fd);  // the mapping keeps the file
  if (data == MAP_FAILED) {
    return absl::ErrnoToStatus(
        map_error, absl::StrCat(directory, ": cannot map ", bytes, " bytes of file-backed memory"));
  }
  return std::unique_ptr<FileBackedMemory>(new FileBackedMemory(data, bytes, mapped));
}

FileBackedMemory::~FileBackedMemory() { munmap(data_, mapped_); }

void FileBackedMemory::ReleaseResidentPages() const {
  // On a shared file mapping MADV_DONTNEED only unmaps: dirty pages stay dirty in the page cache
  // and reach the file; the next touch maps them back. (On anonymous memory it would zero them.)
  madvise(data_, mapped_, MADV_DONTNEED);
}

bool FileBackedMemory::PrepareForWriting() const {
#ifdef MADV_POPULATE_WRITE
  return madvise(data_, mapped_, MADV_POPULATE_WRITE) == 0;  // EINVAL before Linux 5.14
#else
  return false;
#endif
}

int64_t FileBackedMemory::ResidentBytes() const {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return -1;
  std::ostringstream start;
  start << std::hex << reinterpret_cast<uintptr_t>(data_) << '-';
  const std::string prefix = start.str();
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    if (!inside) {
      inside = line.compare(0, prefix.size(), prefix) == 0;
      continue;
    }
    if (line.compare(0, 4, "Rss:") == 0) return std::strtoll(line.c_str() + 4, nullptr, 10) * 1024;
  }
  return -1;
}

}  // namespace slimfit::base
