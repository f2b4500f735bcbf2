#include "base/secrets.h"

#include <openssl/rand.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"

namespace slimfit::base {

std::string RandomSecret(absl::string_view prefix, int bytes) {
  std::string raw(static_cast<size_t>(bytes), '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), bytes) != 1) {
    // OpenSSL's generator failing means the system has no entropy source: nothing safe to do.
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string secret(prefix);
  for (unsigned char c : raw) {
    secret.push_back(kHex[c >> 4]);
    secret.push_back(kHex[c & 0xf]);
  }
  return secret;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  return difference == 0;
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::vector<std::string> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    for (char c : line) {
      if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", line_number, ": a token holds white space"));
      }
    }
    if (line.size() < 8) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": a token must be at least 8 bytes"));
    }
    tokens.emplace_back(line);
  }
  if (tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": holds no token"));
  return tokens;
}

}  // namespace slimfit::base
