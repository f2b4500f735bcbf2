// Whole files in and out, with errors a user can act on.
//
// Writes are atomic: the bytes go to a fresh temporary file beside the target (same file system),
// which is flushed to disk and renamed over the target; the rename is made durable by syncing the
// directory. Readers see the old contents or the new, never a part. WriteFileAtomically writes
// one string (worker identities, device profiles, the daemons' --port_file); AtomicFileWriter
// streams (checkpoints of many tensors, without staging them in one buffer).
//
// Errors carry the errno's canonical code (absl::ErrnoToStatus: NOT_FOUND for a missing file or
// directory, PERMISSION_DENIED, RESOURCE_EXHAUSTED for a full disk, ...) and name the path.
//
// Example:
//   absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create("/ckpt/model.safetensors");
//   if (!writer.ok()) return writer.status();
//   if (absl::Status s = writer->Append(header); !s.ok()) return s;
//   if (absl::Status s = writer->Append(body); !s.ok()) return s;
//   return writer->Commit();  // or let `writer` die: the temporary file is removed
//
// Thread safety: the functions may be called concurrently (temporary names are unique per process
// and call); one AtomicFileWriter is used by one thread at a time.
#ifndef SLIMFIT_BASE_FILES_H_
#define SLIMFIT_BASE_FILES_H_

#include <sys/types.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit::base {

// The whole contents of the regular file at `path`, bytes as they are.
// Errors: the errno's code when it cannot be opened or read; INVALID_ARGUMENT when it is not a
// regular file (a directory, say); the message starts with the path.
[[nodiscard]] absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Reads the regular file at `path` in pieces of at most `chunk_bytes` (> 0), passing each to
// `consume` in order; the file is never held whole. Errors as ReadFileToString.
[[nodiscard]] absl::Status ReadFileInChunks(const std::string& path, size_t chunk_bytes,
                                            const std::function<void(absl::string_view)>& consume);

// Writes `contents` to `path` atomically (see above) with mode 0644 less the umask. The temporary
// file is removed on failure.
[[nodiscard]] absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// A file being written atomically: nothing appears at the target path until Commit succeeds.
// Destroying an uncommitted writer removes its temporary file. Move-only.
class AtomicFileWriter {
 public:
  // Creates the temporary file "<path>.tmp.<pid>.<n>" beside `path` with `mode` less the umask.
  // Errors: the errno's code naming the path (NOT_FOUND when the directory does not exist).
  [[nodiscard]] static absl::StatusOr<AtomicFileWriter> Create(std::string path, mode_t mode = 0644);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  // Appends `bytes`. REQUIRES: not committed.
  [[nodiscard]] absl::Status Append(absl::string_view bytes);
  // Flushes the temporary file to disk, renames it over the target and syncs the directory. On
  // error the target is untouched and the temporary file removed. REQUIRES: called once.
  [[nodiscard]] absl::Status Commit();

  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  // Closes and removes the temporary file; returns an error naming the target and `what`.
  absl::Status Abandon(int error_number, absl::string_view what);

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;  // -1 once committed or abandoned
};

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_FILES_H_
