// What counts in one round (or evaluation): every shard result is validated (GradientAggregator:
// round, version, shard, token count, shapes, finiteness) and screened (NormScreen: a gradient far
// out of line with the job's recent shards); a spot-checked shard's results are held until two
// agree (SpotChecks) and only then counted. Results that pass are summed once per shard.
//
// A large shard may instead be summed as it arrives (StreamedShard): no copy of it is held, and
// the same checks run — each value's as its chunk arrives, the summary's and the norm screen's at
// its end. A streamed shard that fails after some of its values were summed leaves the round's sum
// wrong (tainted()): the dispatcher computes the round again.
//
// The dispatcher acts on the outcome: a rejected result is a strike against its worker; the
// verdicts of spot checks say when a tiebreak is needed and who was outvoted.
//
// Thread safety: thread-safe (results arrive from one thread per worker).
#ifndef SLIMFIT_SERVER_ROUND_COLLECTOR_H_
#define SLIMFIT_SERVER_ROUND_COLLECTOR_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/gradient_aggregator.h"
#include "server/norm_screen.h"
#include "server/spot_checks.h"

namespace slimfit::server {

class RoundCollector {
 public:
  // `screen` (not owned; may be null: no screening) keeps the job's history across rounds.
  // `sum_dtype`, `reuse`: the sum's dtype and a previous round's sum tensors (GradientAggregator).
  RoundCollector(int64_t round, uint64_t parameter_version, std::vector<int64_t> expected_tokens,
                 std::vector<std::vector<int64_t>> shapes, bool evaluate_only, int64_t normalizer,
                 NormScreen* screen, double tolerance, at::ScalarType sum_dtype,
                 std::vector<at::Tensor> reuse = {});

  // The shard's results are compared by two workers before one counts.
  void ExpectCheck(int64_t shard_id) { checks_.Expect(shard_id); }
  bool IsChecked(int64_t shard_id) const { return checks_.IsChecked(shard_id); }

  // The result of `worker_id` for result.summary.shard_id(). OK when counted, held for its spot
  // check, or already counted (ALREADY_EXISTS, harmless); INVALID_ARGUMENT when it fails
  // validation or the norm screen — a strike against the worker.
  absl::Status Accept(const std::string& worker_id, ShardResult result);

  // One shard's result summed as it arrives. Add each chunk's values in order, then Finish with
  // the summary. Destroyed without counting after values were summed, it taints the round's sum.
  // A spot-checked shard is refused at its first values (FAILED_PRECONDITION: nothing summed).
  // Used by one thread; REQUIRES: the collector outlives it.
  class StreamedShard {
   public:
    StreamedShard(RoundCollector* collector, std::string worker_id, int64_t shard_id)
        : collector_(collector), worker_id_(std::move(worker_id)), shard_id_(shard_id) {}
    ~StreamedShard();
    StreamedShard(const StreamedShard&) = delete;
    StreamedShard& operator=(const StreamedShard&) = delete;

    // GradientAggregator::AddValues, the values' squares kept for the norm screen. An error leaves
    // these values out of the sum (earlier ones stay: the shard cannot count any more).
    absl::Status Add(size_t tensor, int64_t first_element, const at::Tensor& values);
    // Counts the shard (Accept's outcomes: OK, or INVALID_ARGUMENT — summary or norm screen — a
    // strike), REQUIRES: every value was added. When it does not count, the sum is tainted.
    absl::Status Finish(const v1::GradientSummary& summary);
    // Values were summed and the shard has not counted (yet).
    bool summed_uncounted() const { return summed_ && !counted_; }
    // The caller gave up on this shard because the round's sum was already tainted by another
    // (its call was cancelled): destroyed uncounted, it names no culprit (and taints the sum, with
    // no culprit, only if nothing had).
    void Abandon() { abandoned_ = true; }

   private:
    // The sum holds values of this shard, which will not count.
    void Taint(const std::string& why);

    RoundCollector* const collector_;
    const std::string worker_id_;
    const int64_t shard_id_;
    double squares_ = 0;  // Σ value² so far, in float64
    bool summed_ = false;
    bool counted_ = false;
    bool abandoned_ = false;
  };
  // Why the round's sum is wrong (a streamed shard failed after some of its values were summed);
  // empty when it is not. The workers whose streamed shards did that.
  std::string tainted() const { return aggregator_.taint(); }
  std::set<std::string> tainting_workers() const;

  // A spot check that settled or needs more: agreed, a tiebreak needed, a liar outvoted, or no
  // two of three agreeing.
  struct Verdict {
    int64_t shard_id = 0;
    SpotChecks::Decision decision;  // kind is never kPending
  };
  // The verdicts since the last call.
  std::vector<Verdict> TakeVerdicts();

  // The shard's check cannot be done (no other worker to ask): a result held for it counts
  // unverified, and one still to come counts as it arrives. REQUIRES: no result of the shard is
  // being accepted meanwhile (the dispatcher calls it between waves).
  absl::Status AbandonCheck(int64_t shard_id);

  // As GradientAggregator's: other token counts a shard may return; a shard the round goes on
  // without.
  void AllowTokenCounts(int64_t shard_id, std::vector<int64_t> counts) {
    aggregator_.AllowTokenCounts(shard_id, std::move(counts));
  }
  absl::Status Drop(int64_t shard_id) { return aggregator_.Drop(shard_id); }
  int64_t shards_counted() const { return aggregator_.shards_counted(); }

  bool complete() const { return aggregator_.complete(); }
  double loss_sum() const { return aggregator_.loss_sum(); }
  int64_t token_count() const { return aggregator_.token_count(); }
  std::vector<at::Tensor> gradient() const { return aggregator_.gradient(); }
  // Workers whose results counted, with the shards each contributed.
  std::map<std::string, std::set<int64_t>> contributions() const;

 private:
  // Counts `result` for `worker_id`, recording the contribution and the norm.
  absl::Status Count(const std::string& worker_id, ShardResult result, double per_token_norm);
  // The norm screen's verdict on a shard's per-token norm (OK without a screen or for an evaluation).
  absl::Status Screen(int64_t shard_id, double per_token_norm) const;
  // Records an accepted shard's contribution and norm.
  void Credit(const std::string& worker_id, int64_t shard_id, double per_token_norm);
  void ForgetNormsLocked(int64_t shard_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const bool evaluate_only_;
  const int64_t normalizer_;
  NormScreen* const screen_;
  GradientAggregator aggregator_;
  SpotChecks checks_;

  mutable absl::Mutex mutex_;
  std::map<std::string, std::set<int64_t>> contributions_ ABSL_GUARDED_BY(mutex_);
  std::vector<Verdict> verdicts_ ABSL_GUARDED_BY(mutex_);
  // Held results of checked shards, by shard: the first answer (for AbandonCheck).
  std::map<int64_t, std::pair<std::string, ShardResult>> held_ ABSL_GUARDED_BY(mutex_);
  // Per-token norms of the answers to checked shards, by (shard, worker): computed once, as each
  // arrived, and used again when one of them counts (no second pass over a held result).
  std::map<std::pair<int64_t, std::string>, double> answer_norms_ ABSL_GUARDED_BY(mutex_);
  std::set<std::string> tainting_workers_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_ROUND_COLLECTOR_H_
