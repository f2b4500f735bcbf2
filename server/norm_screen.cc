#include "server/norm_screen.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "performer/file_backed_tensors.h"
#include "performer/tensor_norms.h"

namespace slimfit::server {

double PerTokenGradientNorm(const std::vector<at::Tensor>& gradient, int64_t normalizer, int64_t tokens) {
  if (tokens <= 0) return 0;
  double squares = 0;
  for (const at::Tensor& g : gradient) {
    squares += performer::SquaredNorm(g);
    performer::ReleaseResidentPages(g);  // a held result in a file: out of memory again
  }
  return PerTokenNorm(squares, normalizer, tokens);
}

double PerTokenNorm(double squares, int64_t normalizer, int64_t tokens) {
  if (tokens <= 0) return 0;
  return std::sqrt(squares) * static_cast<double>(normalizer) / static_cast<double>(tokens);
}

absl::Status NormScreen::Check(double per_token_norm) const {
  std::vector<double> recent;
  {
    absl::MutexLock lock(&mutex_);
    recent.assign(history_.begin(), history_.end());
  }
  if (recent.size() < min_history_) return absl::OkStatus();
  std::nth_element(recent.begin(), recent.begin() + recent.size() / 2, recent.end());
  const double median = recent[recent.size() / 2];
  if (!std::isfinite(per_token_norm) || per_token_norm > factor_ * median ||
      per_token_norm * factor_ < median) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gradient norm %.3g per token is out of line: %.3gx the median %.3g of the job's "
                        "last %d accepted shards",
                        per_token_norm, median > 0 ? per_token_norm / median : INFINITY, median,
                        static_cast<int>(recent.size())));
  }
  return absl::OkStatus();
}

void NormScreen::Accept(double per_token_norm) {
  if (!std::isfinite(per_token_norm)) return;
  absl::MutexLock lock(&mutex_);
  history_.push_back(per_token_norm);
  while (history_.size() > window_) history_.pop_front();
}

std::deque<double> NormScreen::Snapshot() const {
  absl::MutexLock lock(&mutex_);
  return history_;
}

void NormScreen::Restore(std::deque<double> history) {
  absl::MutexLock lock(&mutex_);
  history_ = std::move(history);
  while (history_.size() > window_) history_.pop_front();
}

}  // namespace slimfit::server
