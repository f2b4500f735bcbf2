// Secrets: random bearer tokens, and files of accepted tokens that can be re-read while a daemon
// runs (rotation without downtime).
//
// Example:
//   const std::string credential = RandomSecret("wc-");   // "wc-" + 64 hex digits (256 bits)
//   absl::StatusOr<std::vector<std::string>> tokens = ReadTokenFile("/etc/slimfit/client-tokens");
//
// Thread safety: pure functions (RandomSecret draws from OpenSSL's thread-safe generator).
#ifndef SLIMFIT_BASE_SECRETS_H_
#define SLIMFIT_BASE_SECRETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit::base {

// `prefix` followed by 2·bytes lowercase hex digits of cryptographically random bytes.
std::string RandomSecret(absl::string_view prefix, int bytes = 32);

// Equality that takes the same time for every pair of strings of a given length.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The tokens of a token file: one per line; blank lines and lines starting with '#' are skipped;
// surrounding white space is trimmed. The errno's code naming the path when it cannot be read;
// INVALID_ARGUMENT when it holds no token or a token with white space or shorter than 8 bytes (the
// line number in the message, never the token).
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_SECRETS_H_
