// What counts in one round (or evaluation): every shard result is validated (GradientAggregator:
// round, version, shard, token count, shapes, finiteness) and screened (NormScreen: a gradient far
// out of line with the job's recent shards); a spot-checked shard's results are held until two
// agree (SpotChecks) and only then counted. Results that pass are summed once per shard.
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
                 std::vector<std::vector<int64_t>> shapes, bool evaluate_only, int64_t normalizer, NormScreen* screen,
                 double tolerance, at::ScalarType sum_dtype, std::vector<at::Tensor> reuse = {});

  // The shard's results are compared by two workers before one counts.
  void ExpectCheck(int64_t shard_id) { checks_.Expect(shard_id); }
  bool IsChecked(int64_t shard_id) const { return checks_.IsChecked(shard_id); }

  // The result of `worker_id` for result.summary.shard_id(). OK when counted, held for its spot
  // check, or already counted (ALREADY_EXISTS, harmless); INVALID_ARGUMENT when it fails
  // validation or the norm screen — a strike against the worker.
  absl::Status Accept(const std::string& worker_id, ShardResult result);

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
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_ROUND_COLLECTOR_H_
