// Spot-check verification of shard results (JobSpec.verify_fraction): because every plan computes
// the exact gradient, two workers computing the same shard must agree up to rounding, so a worker
// that returns anything else is caught by comparing. A checked shard is computed by two workers; a
// disagreement is settled by a third, and the one outvoted is the liar. The result that counts
// enters the round's aggregate only once the check is settled.
//
//   Expect(shard)        the shard will be checked (call before its results arrive)
//   Forget(shard)        it will not be after all
//   Add(shard, worker, result) → a Decision:
//     kPending           the first result, held
//     kAgreed            two results agree: `accepted` is to be aggregated
//     kNeedsTiebreak     two results disagree: ask a third worker (not one in `workers`)
//     kResolved          a third result agreed with one of the two: `accepted` is theirs, `odd` the
//                        worker outvoted
//     kUnresolvable      three results, no two agree
//   Results are compared as ‖a − b‖ / ‖b‖ over every gradient tensor (float64) and as the relative
//   difference of the loss sums; both must be within the tolerance.
//
// Thread safety: thread-safe (results arrive from one thread per worker).
#ifndef SLIMFIT_SERVER_SPOT_CHECKS_H_
#define SLIMFIT_SERVER_SPOT_CHECKS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "performer/plan.h"
#include "server/gradient_aggregator.h"

namespace slimfit::server {

// How far two exact results may differ: above rounding of any plan, far below any lie. float32:
// 1e-4 (exact plans agree to within 7e-7, BENCHMARKS.md "What do spot checks cost, and how closely do
// honest workers agree?"); float64: 1e-9. A job with
// bfloat16 products (JobSpec.bf16_products): 3e-2 — each honest result is the float32 one to
// bfloat16 rounding (4e-3 to 6e-3 measured, BENCHMARKS.md), two of them up to twice that apart, on
// different devices' rounding orders; such checks catch gross lies only.
double VerificationTolerance(performer::DType dtype, bool bf16_products);

// Whether shard `shard_id` of `round` is checked, drawn from the job's seed so the choice is the
// same after a restart: a fraction `fraction` of shards, uniformly.
bool IsSpotChecked(uint64_t seed, int64_t round, int64_t shard_id, double fraction);

// ‖a − b‖ / ‖b‖ over every tensor (float64); +inf when shapes differ, when b is zero and a is not.
double RelativeGradientDifference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);

class SpotChecks {
 public:
  explicit SpotChecks(double tolerance) : tolerance_(tolerance) {}

  struct Decision {
    enum class Kind { kPending, kAgreed, kNeedsTiebreak, kResolved, kUnresolvable } kind = Kind::kPending;
    ShardResult accepted;              // kAgreed, kResolved
    std::string odd;                   // kResolved: the worker outvoted
    std::vector<std::string> workers;  // every worker that answered, in order
    double difference = 0;             // of the first two (kResolved: of the two that agree)
  };

  void Expect(int64_t shard_id);
  bool IsChecked(int64_t shard_id) const;
  // The shard is no longer checked (no other worker can give a second opinion); answers held for
  // it are dropped.
  void Forget(int64_t shard_id);
  // REQUIRES: IsChecked(shard_id); `worker_id` has not answered for it yet (a second answer of the
  // same worker is ignored: kPending).
  Decision Add(int64_t shard_id, const std::string& worker_id, ShardResult result);
  double tolerance() const { return tolerance_; }

 private:
  struct Answer {
    std::string worker_id;
    ShardResult result;
  };
  bool Agree(const ShardResult& a, const ShardResult& b, double* difference) const;

  const double tolerance_;
  mutable absl::Mutex mutex_;
  std::map<int64_t, std::vector<Answer>> answers_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_SPOT_CHECKS_H_
