// Since when each worker's counted results are unverified. A spot check that a worker passes
// vouches for it up to that round; results it got counted afterwards without a second opinion are
// suspect until the next one. When a spot check outvotes a worker, every round since its first
// suspect one must be computed again (from the newest checkpoint before it), not just the round it
// was caught in.
//
//   ledger.RoundCompleted(5, /*unverified=*/{"w-a", "w-b"}, /*verified=*/{"w-b"});
//   ledger.SuspectSince("w-a");   // 5 (or earlier, if w-a was unverified before)
//   ledger.SuspectSince("w-b");   // 5: verified in round 5, but it also had unverified results there
//   ledger.RolledBack(3);         // rounds 4.. are computed again: suspicion after round 3 is void
//
// The ledger is rebuilt after a coordinator restart from the job's events (Replay): RoundCompleted
// carries the unverified workers, ShardVerified the verified ones, WorkerQuarantined the rollbacks.
//
// Thread safety: not thread-safe; the job runner's thread owns it.
#ifndef SLIMFIT_SERVER_VERIFICATION_LEDGER_H_
#define SLIMFIT_SERVER_VERIFICATION_LEDGER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "proto/slimfit.pb.h"

namespace slimfit::server {

class VerificationLedger {
 public:
  // Round `round` completed: `unverified` had results counted that no spot check compared;
  // `verified` had a result that agreed with another worker's.
  void RoundCompleted(int64_t round, const std::set<std::string>& unverified,
                      const std::set<std::string>& verified);
  // The job went back to its checkpoint of `round`; later rounds are computed again.
  void RolledBack(int64_t round);
  // The first round since which `worker_id` has unverified results counted; 0 when none.
  int64_t SuspectSince(const std::string& worker_id) const;

  // Rebuilds the ledger from a job's events, oldest first.
  void Replay(const std::vector<v1::JobEvent>& events);

  // The workers a settled spot check vouches for: both when they agreed, the two that agreed after
  // a third opinion.
  static std::set<std::string> Vouched(const v1::ShardVerified& verified);

 private:
  std::map<std::string, int64_t> since_;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_VERIFICATION_LEDGER_H_
