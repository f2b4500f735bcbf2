// Reading a file back whose size and SHA-256 were recorded when it was written (checkpoints,
// uploads), and noticing when the bytes changed on disk since: a flipped bit, a truncation, a file
// replaced or removed. What was written must never be handed on as if it were what was read.
//
// Example:
//   // Streams the file out and only says OK when every byte sent was the recorded one.
//   absl::Status sent = StreamVerifiedFile(path, {bytes, sha256}, 1 << 20,
//                                          [&](absl::string_view chunk) { return Send(chunk); });
//   if (sent.code() == absl::StatusCode::kDataLoss) ...  // the file is not what was recorded
//
// Thread safety: pure functions.
#ifndef SLIMFIT_BASE_VERIFIED_FILE_H_
#define SLIMFIT_BASE_VERIFIED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace slimfit::base {

// What was recorded of a file when it was written.
struct FileDigest {
  int64_t bytes = -1;  // its size; < 0: not recorded (only the SHA-256 is compared)
  std::string sha256;  // 64 lowercase hex characters
};

// Reads the regular file at `path` in pieces of at most `chunk_bytes` (> 0), hashing them and
// passing each to `consume` in file order; `consume` returns false to stop (then CANCELLED).
// DATA_LOSS naming the path when the file is missing or not a regular file, when its size
// differs from `expected.bytes` (checked before any piece is passed on), or when the SHA-256 of
// what was read differs from `expected.sha256` (known only after the last piece: a caller that
// forwards the pieces must treat everything it forwarded as void unless this returns OK). Other
// read errors: the errno's code naming the path.
[[nodiscard]] absl::Status StreamVerifiedFile(const std::string& path, const FileDigest& expected,
                                              size_t chunk_bytes,
                                              const std::function<bool(absl::string_view)>& consume);

// StreamVerifiedFile with nothing passed on: OK when the file is what was recorded.
[[nodiscard]] absl::Status VerifyFile(const std::string& path, const FileDigest& expected);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_VERIFIED_FILE_H_
