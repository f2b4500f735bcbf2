// The bearer tokens a coordinator accepts for one role (client tokens, or worker join tokens): the
// one given by flag or environment, plus those of a token file (base/secrets.h ReadTokenFile) that
// Reload re-reads — on SIGHUP — so a token is rotated without downtime: add the new token to the
// file, SIGHUP, move clients over, remove the old one, SIGHUP.
//
// Thread safety: thread-safe (Accepts runs on gRPC threads while Reload runs on the signal thread).
#ifndef SLIMFIT_SERVER_ACCESS_TOKENS_H_
#define SLIMFIT_SERVER_ACCESS_TOKENS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace slimfit::server {

class AccessTokens {
 public:
  // `fixed` (may be empty) is always accepted; `file` (may be empty: none) is read now.
  // INVALID_ARGUMENT when neither gives a token; the file's errors.
  static absl::StatusOr<std::unique_ptr<AccessTokens>> Create(std::string role, std::string fixed,
                                                              std::string file);

  // Re-reads the file. On error the tokens in use stay as they were and the error is returned.
  absl::Status Reload();
  // Whether `token` is one of the accepted tokens (constant time per candidate).
  bool Accepts(absl::string_view token) const;
  // How many tokens are accepted now.
  size_t size() const;
  const std::string& file() const { return file_; }

 private:
  AccessTokens(std::string role, std::string fixed, std::string file)
      : role_(std::move(role)), fixed_(std::move(fixed)), file_(std::move(file)) {}

  const std::string role_;
  const std::string fixed_;
  const std::string file_;
  mutable absl::Mutex mutex_;
  std::vector<std::string> tokens_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_ACCESS_TOKENS_H_
