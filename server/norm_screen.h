// A screen against gradients far out of line: honest shards of one job have per-token gradient
// norms ‖g‖·N/t (g = ∇(the shard's loss sum / N), t its predicted tokens) within a small factor of
// each other from round to round, whatever plan computed them; a result scaled up by a liar, or
// zeroed, is not. A shard is flagged when its per-token norm is more than `factor` times the median
// of the job's last `window` accepted shards, or less than that median over `factor`. Until
// `min_history` shards were accepted nothing is flagged (spot-check verification covers the start).
//
// Thread safety: thread-safe.
#ifndef SLIMFIT_SERVER_NORM_SCREEN_H_
#define SLIMFIT_SERVER_NORM_SCREEN_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace slimfit::server {

// ‖gradient‖ (float64, over every tensor) · normalizer / tokens; 0 when tokens ≤ 0.
double PerTokenGradientNorm(const std::vector<at::Tensor>& gradient, int64_t normalizer, int64_t tokens);
// The same from Σ gradient² (summed by the caller, e.g. chunk by chunk as a gradient streams in).
double PerTokenNorm(double squares, int64_t normalizer, int64_t tokens);

class NormScreen {
 public:
  explicit NormScreen(double factor = 30, size_t window = 64, size_t min_history = 4)
      : factor_(factor), window_(window), min_history_(min_history) {}

  // OK, or INVALID_ARGUMENT with the norm, the median and how many shards it is the median of.
  absl::Status Check(double per_token_norm) const;
  // Adds an accepted shard's norm to the history.
  void Accept(double per_token_norm);
  // The history as it is, and put back as it was: a try of a round whose sum is thrown away
  // (computed again, or the try fails) leaves the history as before it, so that round's norms do
  // not weigh twice (nor the norms the window dropped for them go missing).
  std::deque<double> Snapshot() const;
  void Restore(std::deque<double> history);

 private:
  const double factor_;
  const size_t window_;
  const size_t min_history_;
  mutable absl::Mutex mutex_;
  std::deque<double> history_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_NORM_SCREEN_H_
