#include "base/sha256.h"

#include <openssl/sha.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"

namespace slimfit::base {

struct Sha256Hasher::State {
  SHA256_CTX context;
};

Sha256Hasher::Sha256Hasher() : state_(std::make_unique<State>()) { SHA256_Init(&state_->context); }
Sha256Hasher::~Sha256Hasher() = default;

void Sha256Hasher::Update(absl::string_view bytes) {
  SHA256_Update(&state_->context, bytes.data(), bytes.size());
}

std::string Sha256Hasher::FinishHex() {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256_Final(digest, &state_->context);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(2 * SHA256_DIGEST_LENGTH, '0');
  for (int i = 0; i < SHA256_DIGEST_LENGTH; ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return hex;
}

std::string Sha256Hex(absl::string_view bytes) {
  Sha256Hasher hasher;
  hasher.Update(bytes);
  return hasher.FinishHex();
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  Sha256Hasher hasher;
  absl::Status read =
      ReadFileInChunks(path, size_t{1} << 20, [&](absl::string_view piece) { hasher.Update(piece); });
  if (!read.ok()) return read;
  return hasher.FinishHex();
}

bool IsSha256Hex(absl::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace slimfit::base
