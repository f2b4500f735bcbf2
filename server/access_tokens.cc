#include "server/access_tokens.h"

#include "absl/strings/str_cat.h"
#include "base/secrets.h"

namespace slimfit::server {

absl::StatusOr<std::unique_ptr<AccessTokens>> AccessTokens::Create(std::string role, std::string fixed,
                                                                   std::string file) {
  std::unique_ptr<AccessTokens> tokens(new AccessTokens(std::move(role), std::move(fixed), std::move(file)));
  if (tokens->fixed_.empty() && tokens->file_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no ", tokens->role_, " token: give one or a token file"));
  }
  if (absl::Status loaded = tokens->Reload(); !loaded.ok()) return loaded;
  return tokens;
}

absl::Status AccessTokens::Reload() {
  std::vector<std::string> tokens;
  if (!fixed_.empty()) tokens.push_back(fixed_);
  if (!file_.empty()) {
    absl::StatusOr<std::vector<std::string>> from_file = base::ReadTokenFile(file_);
    if (!from_file.ok()) {
      return absl::Status(from_file.status().code(),
                          absl::StrCat(role_, " token file: ", from_file.status().message()));
    }
    tokens.insert(tokens.end(), from_file->begin(), from_file->end());
  }
  absl::MutexLock lock(&mutex_);
  tokens_ = std::move(tokens);
  return absl::OkStatus();
}

bool AccessTokens::Accepts(absl::string_view token) const {
  absl::MutexLock lock(&mutex_);
  bool accepted = false;
  for (const std::string& candidate : tokens_) accepted |= base::ConstantTimeEquals(token, candidate);
  return accepted;
}

size_t AccessTokens::size() const {
  absl::MutexLock lock(&mutex_);
  return tokens_.size();
}

}  // namespace slimfit::server
