// SHA-256 as the protocol writes it: 64 lowercase hexadecimal characters (uploads, checkpoints,
// exports). Sha256Hasher digests a stream piece by piece; Sha256Hex and Sha256OfFile are one-shot.
//
// Thread safety: a Sha256Hasher is used by one thread; the functions are pure.
#ifndef SLIMFIT_BASE_SHA256_H_
#define SLIMFIT_BASE_SHA256_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit::base {

class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;

  void Update(absl::string_view bytes);
  // The digest of everything given so far; the hasher is spent afterwards.
  std::string FinishHex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string Sha256Hex(absl::string_view bytes);

// The errno's code (NOT_FOUND, PERMISSION_DENIED, ...) naming the path when the file cannot be
// read (base/files.h, ReadFileInChunks).
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

// True for 64 lowercase hexadecimal characters.
bool IsSha256Hex(absl::string_view text);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_SHA256_H_
