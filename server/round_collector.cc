#include "server/round_collector.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "performer/tensor_norms.h"

namespace slimfit::server {

RoundCollector::RoundCollector(int64_t round, uint64_t parameter_version,
                               std::vector<int64_t> expected_tokens, std::vector<std::vector<int64_t>> shapes,
                               bool evaluate_only, int64_t normalizer, NormScreen* screen, double tolerance,
                               at::ScalarType sum_dtype, std::vector<at::Tensor> reuse)
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
    if (absl::Status screened = Screen(shard_id, norm); !screened.ok()) return screened;
  }
  if (!checks_.IsChecked(shard_id)) return Count(worker_id, std::move(result), norm);

  {
    absl::MutexLock lock(&mutex_);
    if (held_.count(shard_id) == 0) held_.emplace(shard_id, std::make_pair(worker_id, result));
    answer_norms_.emplace(std::make_pair(shard_id, worker_id), norm);
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
    double accepted_norm = 0;
    {
      absl::MutexLock lock(&mutex_);
      accepted_norm = answer_norms_.at(std::make_pair(shard_id, credited));  // computed as it arrived
    }
    counted = Count(credited, decision.accepted, accepted_norm);
    absl::MutexLock lock(&mutex_);
    held_.erase(shard_id);
    ForgetNormsLocked(shard_id);
  }
  absl::MutexLock lock(&mutex_);
  verdicts_.push_back(Verdict{shard_id, std::move(decision)});
  return counted.ok() || absl::IsAlreadyExists(counted) ? absl::OkStatus() : counted;
}

absl::Status RoundCollector::Count(const std::string& worker_id, ShardResult result, double per_token_norm) {
  const int64_t shard_id = result.summary.shard_id();
  absl::Status added = aggregator_.AddValidated(std::move(result));  // Accept validated it
  if (!added.ok()) return added;
  Credit(worker_id, shard_id, per_token_norm);
  return absl::OkStatus();
}

absl::Status RoundCollector::Screen(int64_t shard_id, double per_token_norm) const {
  if (screen_ == nullptr || evaluate_only_) return absl::OkStatus();
  absl::Status screened = screen_->Check(per_token_norm);
  if (screened.ok()) return screened;
  return absl::InvalidArgumentError(absl::StrCat("shard ", shard_id, ": ", screened.message()));
}

void RoundCollector::Credit(const std::string& worker_id, int64_t shard_id, double per_token_norm) {
  if (screen_ != nullptr && !evaluate_only_) screen_->Accept(per_token_norm);
  absl::MutexLock lock(&mutex_);
  contributions_[worker_id].insert(shard_id);
}

RoundCollector::StreamedShard::~StreamedShard() {
  if (!summed_uncounted()) return;
  if (!abandoned_) {
    Taint("its stream failed after some of its values were summed");
  } else if (collector_->aggregator_.taint().empty()) {
    // Abandoned is meant for a round already tainted; should it not be, the sum is wrong all the
    // same — tainted, naming no culprit.
    collector_->aggregator_.Taint(
        absl::StrCat("shard ", shard_id_, " was abandoned after some of its values were summed"));
  }
}

void RoundCollector::StreamedShard::Taint(const std::string& why) {
  collector_->aggregator_.Taint(absl::StrCat("shard ", shard_id_, " from ", worker_id_, ": ", why));
  absl::MutexLock lock(&collector_->mutex_);
  collector_->tainting_workers_.insert(worker_id_);
}

std::set<std::string> RoundCollector::tainting_workers() const {
  absl::MutexLock lock(&mutex_);
  return tainting_workers_;
}

absl::Status RoundCollector::StreamedShard::Add(size_t tensor, int64_t first_element,
                                                const at::Tensor& values) {
  if (!summed_ && collector_->checks_.IsChecked(shard_id_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", shard_id_,
                     " is spot-checked: its results are compared whole, never summed as they arrive"));
  }
  absl::Status added = collector_->aggregator_.AddValues(shard_id_, tensor, first_element, values);
  if (!added.ok()) return added;
  summed_ = true;
  squares_ += performer::SquaredNorm(values);
  return added;
}

absl::Status RoundCollector::StreamedShard::Finish(const v1::GradientSummary& summary) {
  absl::Status counted = [&]() -> absl::Status {
    if (summary.shard_id() != shard_id_) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", shard_id_, ": the summary names shard ", summary.shard_id()));
    }
    if (absl::Status valid = collector_->aggregator_.ValidateSummary(summary); !valid.ok()) return valid;
    const double norm = PerTokenNorm(squares_, collector_->normalizer_, summary.token_count());
    if (absl::Status screened = collector_->Screen(shard_id_, norm); !screened.ok()) return screened;
    if (absl::Status valid = collector_->aggregator_.CountStreamed(summary); !valid.ok()) return valid;
    counted_ = true;
    collector_->Credit(worker_id_, shard_id_, norm);
    return absl::OkStatus();
  }();
  if (!counted.ok() && summed_) {
    Taint(absl::StrCat("refused after its values were summed (", counted.message(), ")"));
  }
  return counted;
}

std::vector<RoundCollector::Verdict> RoundCollector::TakeVerdicts() {
  absl::MutexLock lock(&mutex_);
  std::vector<Verdict> verdicts = std::move(verdicts_);
  verdicts_.clear();
  return verdicts;
}

absl::Status RoundCollector::AbandonCheck(int64_t shard_id) {
  std::optional<std::pair<std::string, ShardResult>> held;
  double norm = 0;
  {
    absl::MutexLock lock(&mutex_);
    if (auto it = held_.find(shard_id); it != held_.end()) {
      held = std::move(it->second);
      held_.erase(it);
      norm = answer_norms_.at(std::make_pair(shard_id, held->first));  // computed as it arrived
    }
    ForgetNormsLocked(shard_id);
  }
  checks_.Forget(shard_id);
  if (!held.has_value()) return absl::OkStatus();
  absl::Status counted = Count(held->first, std::move(held->second), norm);
  return counted.ok() || absl::IsAlreadyExists(counted) ? absl::OkStatus() : counted;
}

void RoundCollector::ForgetNormsLocked(int64_t shard_id) {
  answer_norms_.erase(answer_norms_.lower_bound(std::make_pair(shard_id, std::string())),
                      answer_norms_.lower_bound(std::make_pair(shard_id + 1, std::string())));
}

std::map<std::string, std::set<int64_t>> RoundCollector::contributions() const {
  absl::MutexLock lock(&mutex_);
  return contributions_;
}

}  // namespace slimfit::server
