// Files written atomically: a fresh temporary file beside the target (same file system), flushed
// to disk, renamed over it, and the rename made durable by syncing the directory. Readers see the
// old contents or the new, never a part. Used for worker identities, device profiles and the
// daemons' --port_file.
//
// Thread safety: concurrent calls are safe (temporary names are unique per process and call).
#ifndef SLIMFIT_PROTO_ATOMIC_FILE_H_
#define SLIMFIT_PROTO_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace slimfit {

// Writes `contents` to `path` atomically. The file's mode is 0644 less the umask. Errors carry the
// errno's code (NOT_FOUND for a missing directory, PERMISSION_DENIED, ...) and name the path; the
// temporary file is removed on failure.
[[nodiscard]] absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace slimfit

#endif  // SLIMFIT_PROTO_ATOMIC_FILE_H_
