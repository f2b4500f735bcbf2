#include "server/round_collector.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace slimfit::server {

RoundCollector::RoundCollector(int64_t round, uint64_t parameter_version, std::vector<int64_t> expected_tokens,
                               std::vector<std::vector<int64_t>> shapes, bool evaluate_only, int64_t normalizer,
                               NormScreen* screen, double tolerance, at::ScalarType sum_dtype,
                               std::vector<at::Tensor> reuse)
    : evaluate_only_(evaluate_only),
      normalizer_(normalizer),
      screen_(screen),
      aggregator_(round, parameter_version, std::move(expected_tokens), std::move(shapes), evaluate_only,
                  sum_dtype, std::move(reuse)),
      checks_(tolerance) {}

absl::Status RoundCollector::Accept(const std::string& worker_id, ShardResult result) {
  if (absl::Status valid = aggregator_.Validate(result); !valid.ok()) return valid;
  const int64_t shard_id = result.summary.shard_id();
  double norm = 0;
  if (!evaluate_only_) {
    norm = PerTokenGradientNorm(result.gradient, normalizer_, result.summary.token_count());
    if (screen_ != nullptr) {
      if (absl::Status screened = screen_->Check(norm); !screened.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("shard ", shard_id, ": ", screened.message()));
      }
    }
  }
  if (!checks_.IsChecked(shard_id)) return Count(worker_id, std::move(result), norm);

  {
    absl::MutexLock lock(&mutex_);
    if (held_.count(shard_id) == 0) held_.emplace(shard_id, std::make_pair(worker_id, result));
  }
  SpotChecks::Decision decision = checks_.Add(shard_id, worker_id, std::move(result));
  if (decision.kind == SpotChecks::Decision::Kind::kPending) return absl::OkStatus();
  absl::Status counted = absl::OkStatus();
  if (decision.kind == SpotChecks::Decision::Kind::kAgreed ||
      decision.kind == SpotChecks::Decision::Kind::kResolved) {
    // The accepted result is credited to the worker whose answer it is (the first of the agreeing).
    std::string credited = decision.workers.front();
    if (decision.kind == SpotChecks::Decision::Kind::kResolved && credited == decision.odd) {
      credited = decision.workers[1];
    }
    ShardResult accepted = decision.accepted;
    counted = Count(credited, std::move(accepted), PerTokenGradientNorm(decision.accepted.gradient, normalizer_,
                                                                        decision.accepted.summary.token_count()));
    absl::MutexLock lock(&mutex_);
    held_.erase(shard_id);
  }
  absl::MutexLock lock(&mutex_);
  verdicts_.push_back(Verdict{shard_id, std::move(decision)});
  return counted.ok() || absl::IsAlreadyExists(counted) ? absl::OkStatus() : counted;
}

absl::Status RoundCollector::Count(const std::string& worker_id, ShardResult result, double per_token_norm) {
  const int64_t shard_id = result.summary.shard_id();
  absl::Status added = aggregator_.Add(std::move(result));
  if (!added.ok()) return added;
  if (screen_ != nullptr && !evaluate_only_) screen_->Accept(per_token_norm);
  absl::MutexLock lock(&mutex_);
  contributions_[worker_id].insert(shard_id);
  return absl::OkStatus();
}

std::vector<RoundCollector::Verdict> RoundCollector::TakeVerdicts() {
  absl::MutexLock lock(&mutex_);
  std::vector<Verdict> verdicts = std::move(verdicts_);
  verdicts_.clear();
  return verdicts;
}

absl::Status RoundCollector::AbandonCheck(int64_t shard_id) {
  std::optional<std::pair<std::string, ShardResult>> held;
  {
    absl::MutexLock lock(&mutex_);
    if (auto it = held_.find(shard_id); it != held_.end()) {
      held = std::move(it->second);
      held_.erase(it);
    }
  }
  checks_.Forget(shard_id);
  if (!held.has_value()) return absl::OkStatus();
  const double norm = PerTokenGradientNorm(held->second.gradient, normalizer_, held->second.summary.token_count());
  absl::Status counted = Count(held->first, std::move(held->second), norm);
  return counted.ok() || absl::IsAlreadyExists(counted) ? absl::OkStatus() : counted;
}

std::map<std::string, std::set<int64_t>> RoundCollector::contributions() const {
  absl::MutexLock lock(&mutex_);
  return contributions_;
}

}  // namespace slimfit::server
