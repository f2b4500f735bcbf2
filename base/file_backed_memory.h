// Memory that lives in a file instead of the process's anonymous memory: a shared mapping of an
// unnamed file (O_TMPFILE, or a name removed at once) in a directory the caller chooses. What is
// written goes to the file through the kernel's page cache; ReleaseResidentPages takes the pages
// out of this process's resident set without losing them (they stay in the page cache, and under
// memory pressure the kernel writes them to the file and reclaims them instead of failing). Touching
// them again maps them back from the page cache or reads them from the file.
//
// For state that is large and touched in one pass now and then — the coordinator's optimizer
// moments (performer/file_backed_tensors.h): its resident memory holds them only while a step works
// on them. The file is unnamed: nothing is left behind when the process ends, however it ends; its
// blocks are allocated up front (posix_fallocate), so a full disk is an error here, not a SIGBUS
// on a later write.
//
// Thread safety: the data may be read and written from any thread (as plain memory);
// ReleaseResidentPages may run concurrently with readers and writers (they fault the pages back).
#ifndef SLIMFIT_BASE_FILE_BACKED_MEMORY_H_
#define SLIMFIT_BASE_FILE_BACKED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace slimfit::base {

// Whether `directory` is on a file system kept in memory (tmpfs, ramfs: /dev/shm, often /tmp),
// where file-backed memory saves no memory at all. False when it cannot be told.
bool IsInMemoryFileSystem(const std::string& directory);

class FileBackedMemory {
 public:
  // `bytes` (≥ 1) of zeros in an unnamed file in `directory`. Errors, naming the directory: the
  // errno's code when the file cannot be created (NOT_FOUND: no such directory; PERMISSION_DENIED),
  // RESOURCE_EXHAUSTED when the disk has no room for it, INVALID_ARGUMENT for bytes < 1.
  static absl::StatusOr<std::unique_ptr<FileBackedMemory>> Create(const std::string& directory,
                                                                  int64_t bytes);

  ~FileBackedMemory();  // unmaps; the file goes with its last mapping
  FileBackedMemory(const FileBackedMemory&) = delete;
  FileBackedMemory& operator=(const FileBackedMemory&) = delete;

  void* data() const { return data_; }
  int64_t size() const { return size_; }

  // Drops every page of the mapping from this process's resident set; their contents stay (in the
  // page cache or the file). Cheap when nothing is resident.
  void ReleaseResidentPages() const;

  // Maps every page of the mapping into the resident set, writable, in one call (Linux 5.14's
  // MADV_POPULATE_WRITE) before a pass that will write all of it: one system call instead of a
  // page fault per page. Only a hint: where the kernel lacks it nothing happens (false), and the
  // pass faults the pages in as it goes.
  bool PrepareForWriting() const;

  // Bytes of the mapping resident in this process now (its "Rss" in /proc/self/smaps); -1 when
  // that cannot be read. For tests and benchmarks: it reads a file of the whole process's mappings.
  int64_t ResidentBytes() const;

 private:
  FileBackedMemory(void* data, int64_t size, size_t mapped) : data_(data), size_(size), mapped_(mapped) {}

  void* data_;
  int64_t size_;
  size_t mapped_;  // size_ rounded up to whole pages
};

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_FILE_BACKED_MEMORY_H_
