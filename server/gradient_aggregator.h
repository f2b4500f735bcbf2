// Aggregation of a round: the token-weighted sum of shard gradients. Every shard's gradient is
// already ∇(its loss_sum / the round's predicted tokens) (the coordinator sends that normaliser),
// so the plain sum over shards is the gradient of the round's mean loss — exactly the gradient of
// the whole batch. Each result is validated before it counts: round and parameter version, a
// shard id of this round not counted yet, token count as expected for the shard, finite loss and
// gradient — no element larger than the sum's dtype can hold n shards of (max / n), so finite
// shards never sum to infinity — names and shapes (the TensorAssembler already checked those on
// the wire). The sum is
// kept in the dtype it is made for (the coordinator: the parameters' dtype, so that the optimizer
// takes it as the gradient without a copy).
//
// A shard's gradient may also be summed as it arrives, chunk by chunk (AddValues, then
// CountStreamed with its summary), so that no copy of it is held. Such a shard cannot be taken back
// out: when it fails after some of its values were summed, the caller calls Taint and the sum is
// good for nothing (the round must be computed again).
//
// Thread safety: thread-safe (shard results arrive from one thread per worker).
#ifndef SLIMFIT_SERVER_GRADIENT_AGGREGATOR_H_
#define SLIMFIT_SERVER_GRADIENT_AGGREGATOR_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/slimfit.pb.h"

namespace slimfit::server {

struct ShardResult {
  v1::GradientSummary summary;
  std::vector<at::Tensor> gradient;  // empty for evaluation shards
};

class GradientAggregator {
 public:
  // `expected_tokens[shard_id]` is the predicted-token count of each shard of the round;
  // `shapes` the parameters' shapes in model order (empty for an evaluation); `sum_dtype` the
  // floating dtype of the sum. `reuse`: tensors of a previous round's sum to zero and sum into
  // instead of allocating (used when they match `shapes` and `sum_dtype`, ignored otherwise).
  GradientAggregator(int64_t round, uint64_t parameter_version, std::vector<int64_t> expected_tokens,
                     std::vector<std::vector<int64_t>> shapes, bool evaluate_only, at::ScalarType sum_dtype,
                     std::vector<at::Tensor> reuse = {});

  // INVALID_ARGUMENT (naming the problem) when the result does not belong to this round (round,
  // version, shard id, token count) or is malformed or not finite; OK otherwise. Add checks it too.
  absl::Status Validate(const ShardResult& result) const;
  // Validate's checks of the summary alone (round, version, shard id, token count, loss).
  absl::Status ValidateSummary(const v1::GradientSummary& summary) const;
  // Counts the result once. ALREADY_EXISTS when the shard already counted (the result is dropped,
  // harmless); the errors of Validate.
  absl::Status Add(ShardResult result);
  // Add without Validate's pass over the values: for a result that passed Validate already (the
  // round collector validates every result as it arrives). ALREADY_EXISTS as Add.
  absl::Status AddValidated(ShardResult result);

  // Sums `values` (finite, within the bound Validate applies) into gradient tensor `tensor` of the
  // sum from element `first_element` on, for shard `shard_id`, not counted yet. INVALID_ARGUMENT
  // naming the problem (nothing is summed then); DEADLINE_EXCEEDED when the shard was dropped.
  absl::Status AddValues(int64_t shard_id, size_t tensor, int64_t first_element, const at::Tensor& values);
  // Counts a shard whose every value went through AddValues: validates the summary as Validate
  // does (round, version, shard, token count, loss) and adds its loss and tokens. Errors as Add's.
  absl::Status CountStreamed(const v1::GradientSummary& summary);
  // Values summed for a shard that will not count: the sum is wrong from now on (`why` says how).
  void Taint(const std::string& why);
  // Why the sum is wrong, when it is (the first Taint); empty otherwise.
  std::string taint() const;

  // The shard may return any of these token counts instead of its expected one (a local-steps
  // shard under a time budget: the counts at its steps' boundaries). REQUIRES: before any result.
  void AllowTokenCounts(int64_t shard_id, std::vector<int64_t> counts);
  // The shard is dropped: the round completes without it and a result that arrives later is
  // refused. FAILED_PRECONDITION when it counted already.
  absl::Status Drop(int64_t shard_id);

  // Every shard counted or dropped.
  bool complete() const;
  int64_t shards_counted() const;
  // REQUIRES: complete(). The summed gradient (in `sum_dtype`), the loss sum and predicted tokens.
  std::vector<at::Tensor> gradient() const;
  double loss_sum() const;
  int64_t token_count() const;

 private:
  // Validate's checks of one gradient tensor's values.
  absl::Status ValidateValues(const std::string& what, size_t tensor, const at::Tensor& values) const;
  // OK while the shard may still count: ALREADY_EXISTS when it counted, DEADLINE_EXCEEDED when
  // it was dropped.
  absl::Status OpenLocked(int64_t shard_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Marks `summary`'s shard counted with its loss and tokens; its errors are Add's.
  absl::Status CountLocked(const v1::GradientSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int64_t round_;
  const uint64_t parameter_version_;
  const std::vector<int64_t> expected_tokens_;
  const std::vector<std::vector<int64_t>> shapes_;
  const bool evaluate_only_;
  const at::ScalarType sum_dtype_;
  mutable absl::Mutex mutex_;
  std::vector<bool> counted_ ABSL_GUARDED_BY(mutex_);
  std::vector<bool> dropped_ ABSL_GUARDED_BY(mutex_);
  int64_t shards_dropped_ ABSL_GUARDED_BY(mutex_) = 0;
  std::map<int64_t, std::vector<int64_t>> allowed_tokens_ ABSL_GUARDED_BY(mutex_);
  int64_t shards_counted_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<at::Tensor> sum_ ABSL_GUARDED_BY(mutex_);
  double loss_sum_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t token_count_ ABSL_GUARDED_BY(mutex_) = 0;
  std::string taint_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_GRADIENT_AGGREGATOR_H_
