#include "server/spot_checks.h"

#include <cmath>
#include <limits>
#include <utility>

#include "performer/file_backed_tensors.h"

namespace slimfit::server {
namespace {

// SplitMix64: a well-mixed 64-bit hash of the inputs.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

double VerificationTolerance(performer::DType dtype, bool bf16_products) {
  if (bf16_products) return 3e-2;
  return dtype == performer::DType::kFloat64 ? 1e-9 : 1e-4;
}

bool IsSpotChecked(uint64_t seed, int64_t round, int64_t shard_id, double fraction) {
  if (fraction <= 0) return false;
  if (fraction >= 1) return true;
  const uint64_t h = Mix(Mix(Mix(seed) ^ static_cast<uint64_t>(round)) ^ static_cast<uint64_t>(shard_id));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < fraction;
}

double RelativeGradientDifference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double difference = 0, reference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].sizes().equals(b[i].sizes())) return std::numeric_limits<double>::infinity();
    const at::Tensor x = a[i].to(at::kDouble), y = b[i].to(at::kDouble);
    difference += (x - y).pow(2).sum().item<double>();
    reference += y.pow(2).sum().item<double>();
    performer::ReleaseResidentPages(a[i]);  // results held in files: out of memory again
    performer::ReleaseResidentPages(b[i]);
  }
  if (reference == 0) return difference == 0 ? 0 : std::numeric_limits<double>::infinity();
  return std::sqrt(difference / reference);
}

void SpotChecks::Expect(int64_t shard_id) {
  absl::MutexLock lock(&mutex_);
  answers_[shard_id];
}

bool SpotChecks::IsChecked(int64_t shard_id) const {
  absl::MutexLock lock(&mutex_);
  return answers_.count(shard_id) > 0;
}

void SpotChecks::Forget(int64_t shard_id) {
  absl::MutexLock lock(&mutex_);
  answers_.erase(shard_id);
}

bool SpotChecks::Agree(const ShardResult& a, const ShardResult& b, double* difference) const {
  *difference = RelativeGradientDifference(a.gradient, b.gradient);
  const double loss_scale = std::max(std::abs(b.summary.loss_sum()), 1e-30);
  const double loss_difference = std::abs(a.summary.loss_sum() - b.summary.loss_sum()) / loss_scale;
  return *difference <= tolerance_ && loss_difference <= tolerance_ &&
         a.summary.token_count() == b.summary.token_count();
}

SpotChecks::Decision SpotChecks::Add(int64_t shard_id, const std::string& worker_id, ShardResult result) {
  absl::MutexLock lock(&mutex_);
  std::vector<Answer>& answers = answers_[shard_id];
  Decision decision;
  for (const Answer& answer : answers) {
    if (answer.worker_id == worker_id) return decision;  // a repeated answer of one worker counts once
  }
  answers.push_back(Answer{worker_id, std::move(result)});
  for (const Answer& answer : answers) decision.workers.push_back(answer.worker_id);
  if (answers.size() == 1) return decision;
  if (answers.size() == 2) {
    if (Agree(answers[0].result, answers[1].result, &decision.difference)) {
      decision.kind = Decision::Kind::kAgreed;
      decision.accepted = answers[0].result;
    } else {
      decision.kind = Decision::Kind::kNeedsTiebreak;
    }
    return decision;
  }
  // Three answers: the pair that agrees wins, the other is the odd one out.
  for (size_t odd = 0; odd < 3; ++odd) {
    const size_t i = odd == 0 ? 1 : 0;
    const size_t j = odd == 2 ? 1 : 2;
    if (Agree(answers[i].result, answers[j].result, &decision.difference)) {
      decision.kind = Decision::Kind::kResolved;
      decision.accepted = answers[i].result;
      decision.odd = answers[odd].worker_id;
      return decision;
    }
  }
  decision.kind = Decision::Kind::kUnresolvable;
  return decision;
}

}  // namespace slimfit::server
