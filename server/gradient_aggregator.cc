#include "server/gradient_aggregator.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "performer/file_backed_tensors.h"
#include "performer/tensor_norms.h"

namespace slimfit::server {
namespace {

// sum += g, element by element, the same values as sum.add_(g.to(sum's dtype)), for contiguous
// CPU tensors: a float32 sum of float32 shards or a float64 one of float32 or float64 shards.
// LibTorch 1.13 converts float32 to float64 element by element without vectorising (0.28 s for
// 100M values here); this loop is memory-bound. Other dtypes and layouts go through add_.
template <typename Sum, typename Shard>
void AddLoop(at::Tensor& sum, const at::Tensor& g) {
  Sum* out = sum.data_ptr<Sum>();
  const Shard* in = g.data_ptr<Shard>();
  at::parallel_for(0, g.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] += static_cast<Sum>(in[i]);
  });
}

void AddInto(at::Tensor& sum, const at::Tensor& g) {
  if (!g.is_contiguous() || !g.device().is_cpu() || !sum.is_contiguous() || !sum.device().is_cpu()) {
    sum.add_(g);
  } else if (sum.scalar_type() == at::kDouble && g.scalar_type() == at::kFloat) {
    AddLoop<double, float>(sum, g);
  } else if (sum.scalar_type() == at::kDouble && g.scalar_type() == at::kDouble) {
    AddLoop<double, double>(sum, g);
  } else if (sum.scalar_type() == at::kFloat && g.scalar_type() == at::kFloat) {
    AddLoop<float, float>(sum, g);
  } else {
    sum.add_(g);
  }
}

}  // namespace

GradientAggregator::GradientAggregator(int64_t round, uint64_t parameter_version,
                                       std::vector<int64_t> expected_tokens,
                                       std::vector<std::vector<int64_t>> shapes, bool evaluate_only,
                                       at::ScalarType sum_dtype, std::vector<at::Tensor> reuse)
    : round_(round),
      parameter_version_(parameter_version),
      expected_tokens_(std::move(expected_tokens)),
      shapes_(std::move(shapes)),
      evaluate_only_(evaluate_only),
      sum_dtype_(sum_dtype) {
  counted_.assign(expected_tokens_.size(), false);
  dropped_.assign(expected_tokens_.size(), false);
  if (evaluate_only_) return;
  bool reusable = reuse.size() == shapes_.size();
  for (size_t i = 0; reusable && i < shapes_.size(); ++i) {
    reusable = reuse[i].defined() && reuse[i].scalar_type() == sum_dtype && reuse[i].is_contiguous() &&
               reuse[i].sizes().equals(shapes_[i]);
  }
  if (reusable) {
    // Memory the process already has: zeroing it costs no page faults.
    for (at::Tensor& tensor : reuse) sum_.push_back(tensor.zero_());
  } else {
    for (const auto& shape : shapes_) sum_.push_back(at::zeros(shape, sum_dtype));
  }
}

absl::Status GradientAggregator::ValidateSummary(const v1::GradientSummary& s) const {
  const std::string what = absl::StrCat("round ", round_, " shard ", s.shard_id(), ": ");
  if (s.round() != round_ || s.parameter_version() != parameter_version_) {
    return absl::InvalidArgumentError(absl::StrCat(what, "result is for round ", s.round(), " version ",
                                                   s.parameter_version(), ", expected round ", round_,
                                                   " version ", parameter_version_));
  }
  if (s.shard_id() < 0 || s.shard_id() >= static_cast<int64_t>(expected_tokens_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "no such shard (", expected_tokens_.size(), " in the round)"));
  }
  if (s.token_count() != expected_tokens_[s.shard_id()]) {
    absl::MutexLock lock(&mutex_);
    auto allowed = allowed_tokens_.find(s.shard_id());
    if (allowed == allowed_tokens_.end() ||
        std::find(allowed->second.begin(), allowed->second.end(), s.token_count()) == allowed->second.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, s.token_count(), " predicted tokens, expected ", expected_tokens_[s.shard_id()],
                       allowed == allowed_tokens_.end() ? "" : " or a step boundary's"));
    }
  }
  if (!std::isfinite(s.loss_sum()))
    return absl::InvalidArgumentError(absl::StrCat(what, "loss is not finite"));
  return absl::OkStatus();
}

absl::Status GradientAggregator::ValidateValues(const std::string& what, size_t tensor,
                                                const at::Tensor& values) const {
  // Not finite ⇔ an element is not: one reduction, no temporary (isfinite().all() builds a
  // boolean tensor the size of the gradient, 5× slower in LibTorch 1.13).
  const double magnitude = performer::MaxMagnitude(values);
  if (!std::isfinite(magnitude)) {
    return absl::InvalidArgumentError(absl::StrCat(what, "gradient tensor ", tensor, " is not finite"));
  }
  // Every shard within max / shards: finite shards cannot add up to an infinite sum.
  const double limit =
      (sum_dtype_ == at::kFloat ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max()) /
      static_cast<double>(std::max<size_t>(1, expected_tokens_.size()));
  if (magnitude > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "gradient tensor ", tensor, " holds a value of magnitude ", magnitude,
                     ", more than a sum of ", expected_tokens_.size(), " shards in ",
                     sum_dtype_ == at::kFloat ? "float32" : "float64", " can hold"));
  }
  return absl::OkStatus();
}

absl::Status GradientAggregator::Validate(const ShardResult& result) const {
  if (absl::Status summary = ValidateSummary(result.summary); !summary.ok()) return summary;
  if (evaluate_only_) return absl::OkStatus();
  const std::string what = absl::StrCat("round ", round_, " shard ", result.summary.shard_id(), ": ");
  if (result.gradient.size() != shapes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, result.gradient.size(), " gradient tensors, expected ", shapes_.size()));
  }
  for (size_t i = 0; i < shapes_.size(); ++i) {
    if (!result.gradient[i].sizes().equals(shapes_[i])) {
      return absl::InvalidArgumentError(absl::StrCat(what, "gradient tensor ", i, " has the wrong shape"));
    }
    if (absl::Status values = ValidateValues(what, i, result.gradient[i]); !values.ok()) return values;
    performer::ReleaseResidentPages(result.gradient[i]);  // a held result in a file: out of memory again
  }
  return absl::OkStatus();
}

absl::Status GradientAggregator::OpenLocked(int64_t shard_id) const {
  const std::string what = absl::StrCat("round ", round_, " shard ", shard_id, ": ");
  if (counted_[shard_id]) return absl::AlreadyExistsError(absl::StrCat(what, "already counted"));
  if (dropped_[shard_id]) {
    return absl::DeadlineExceededError(absl::StrCat(what, "dropped: the round went on without it"));
  }
  return absl::OkStatus();
}

absl::Status GradientAggregator::CountLocked(const v1::GradientSummary& s) {
  if (absl::Status open = OpenLocked(s.shard_id()); !open.ok()) return open;
  counted_[s.shard_id()] = true;
  ++shards_counted_;
  loss_sum_ += s.loss_sum();
  token_count_ += s.token_count();
  return absl::OkStatus();
}

absl::Status GradientAggregator::Add(ShardResult result) {
  if (absl::Status valid = Validate(result); !valid.ok()) return valid;
  return AddValidated(std::move(result));
}

absl::Status GradientAggregator::AddValidated(ShardResult result) {
  absl::MutexLock lock(&mutex_);
  if (absl::Status counted = CountLocked(result.summary); !counted.ok()) return counted;
  for (size_t i = 0; i < sum_.size(); ++i) {
    AddInto(sum_[i], result.gradient[i]);
    performer::ReleaseResidentPages(result.gradient[i]);
  }
  return absl::OkStatus();
}

absl::Status GradientAggregator::AddValues(int64_t shard_id, size_t tensor, int64_t first_element,
                                           const at::Tensor& values) {
  const std::string what = absl::StrCat("round ", round_, " shard ", shard_id, ": ");
  if (evaluate_only_) return absl::InvalidArgumentError(absl::StrCat(what, "an evaluation sums no gradient"));
  if (shard_id < 0 || shard_id >= static_cast<int64_t>(expected_tokens_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "no such shard (", expected_tokens_.size(), " in the round)"));
  }
  if (tensor >= shapes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "no gradient tensor ", tensor, " (", shapes_.size(), ")"));
  }
  int64_t elements = 1;
  for (const int64_t extent : shapes_[tensor]) elements *= extent;
  if (values.dim() != 1 || first_element < 0 || first_element + values.numel() > elements) {
    return absl::InvalidArgumentError(absl::StrCat(what, "values ", first_element, "..",
                                                   first_element + values.numel(), " of gradient tensor ",
                                                   tensor, " are outside its ", elements, " elements"));
  }
  if (absl::Status valid = ValidateValues(what, tensor, values); !valid.ok()) return valid;
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = OpenLocked(shard_id); !open.ok()) return open;
  at::Tensor part = sum_[tensor].view({-1}).narrow(0, first_element, values.numel());
  AddInto(part, values);
  return absl::OkStatus();
}

absl::Status GradientAggregator::CountStreamed(const v1::GradientSummary& summary) {
  if (absl::Status valid = ValidateSummary(summary); !valid.ok()) return valid;
  absl::MutexLock lock(&mutex_);
  return CountLocked(summary);
}

void GradientAggregator::Taint(const std::string& why) {
  absl::MutexLock lock(&mutex_);
  if (taint_.empty()) taint_ = why.empty() ? "a shard's values were summed and it did not count" : why;
}

std::string GradientAggregator::taint() const {
  absl::MutexLock lock(&mutex_);
  return taint_;
}

void GradientAggregator::AllowTokenCounts(int64_t shard_id, std::vector<int64_t> counts) {
  absl::MutexLock lock(&mutex_);
  allowed_tokens_[shard_id] = std::move(counts);
}

absl::Status GradientAggregator::Drop(int64_t shard_id) {
  absl::MutexLock lock(&mutex_);
  if (shard_id < 0 || shard_id >= static_cast<int64_t>(dropped_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("round ", round_, ": no shard ", shard_id, " to drop"));
  }
  if (counted_[shard_id]) {
    return absl::FailedPreconditionError(
        absl::StrCat("round ", round_, " shard ", shard_id, ": counted already"));
  }
  if (!dropped_[shard_id]) {
    dropped_[shard_id] = true;
    ++shards_dropped_;
  }
  return absl::OkStatus();
}

bool GradientAggregator::complete() const {
  absl::MutexLock lock(&mutex_);
  return shards_counted_ + shards_dropped_ == static_cast<int64_t>(expected_tokens_.size());
}

int64_t GradientAggregator::shards_counted() const {
  absl::MutexLock lock(&mutex_);
  return shards_counted_;
}

std::vector<at::Tensor> GradientAggregator::gradient() const {
  absl::MutexLock lock(&mutex_);
  return sum_;
}

double GradientAggregator::loss_sum() const {
  absl::MutexLock lock(&mutex_);
  return loss_sum_;
}

int64_t GradientAggregator::token_count() const {
  absl::MutexLock lock(&mutex_);
  return token_count_;
}

}  // namespace slimfit::server
