#include "worker/worker_identity.h"

#include "base/secrets.h"

namespace slimfit::worker {

std::string WorkerIdentity::BearerForCoordinator() const {
  absl::MutexLock lock(&mutex_);
  return credential_.empty() ? join_token_ : credential_;
}

bool WorkerIdentity::has_credential() const {
  absl::MutexLock lock(&mutex_);
  return !credential_.empty();
}

void WorkerIdentity::SetCredential(std::string credential) {
  absl::MutexLock lock(&mutex_);
  credential_ = std::move(credential);
}

void WorkerIdentity::ClearCredential() {
  absl::MutexLock lock(&mutex_);
  credential_.clear();
}

void WorkerIdentity::SetCoordinatorToken(std::string token) {
  absl::MutexLock lock(&mutex_);
  coordinator_token_ = std::move(token);
}

bool WorkerIdentity::AcceptsCoordinator(absl::string_view token) const {
  absl::MutexLock lock(&mutex_);
  return !coordinator_token_.empty() && base::ConstantTimeEquals(token, coordinator_token_);
}

bool WorkerIdentity::AcceptsOperator(absl::string_view token) const {
  if (!join_token_.empty() && base::ConstantTimeEquals(token, join_token_)) return true;
  return AcceptsCoordinator(token);
}

}  // namespace slimfit::worker
