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
// Thread safety: thread-safe (shard results arrive from one thread per worker).
#ifndef SLIMFIT_SERVER_GRADIENT_AGGREGATOR_H_
#define SLIMFIT_SERVER_GRADIENT_AGGREGATOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

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
  // Counts the result once. ALREADY_EXISTS when the shard already counted (the result is dropped,
  // harmless); the errors of Validate.
  absl::Status Add(ShardResult result);

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
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_GRADIENT_AGGREGATOR_H_
