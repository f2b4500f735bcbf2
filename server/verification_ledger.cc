#include "server/verification_ledger.h"

namespace slimfit::server {

void VerificationLedger::RoundCompleted(int64_t round, const std::set<std::string>& unverified,
                                        const std::set<std::string>& verified) {
  for (const std::string& worker : verified) since_.erase(worker);
  for (const std::string& worker : unverified) since_.emplace(worker, round);  // keeps an earlier round
}

void VerificationLedger::RolledBack(int64_t round) {
  for (auto it = since_.begin(); it != since_.end();) {
    it = it->second > round ? since_.erase(it) : std::next(it);
  }
}

int64_t VerificationLedger::SuspectSince(const std::string& worker_id) const {
  auto it = since_.find(worker_id);
  return it == since_.end() ? 0 : it->second;
}

std::set<std::string> VerificationLedger::Vouched(const v1::ShardVerified& verified) {
  std::set<std::string> vouched;
  for (const std::string& worker : verified.worker_ids()) {
    if (worker != verified.odd_worker_id()) vouched.insert(worker);
  }
  return vouched;
}

void VerificationLedger::Replay(const std::vector<v1::JobEvent>& events) {
  std::set<std::string> verified;  // by the spot checks of the round in progress
  for (const v1::JobEvent& event : events) {
    if (event.has_shard_verified()) {
      const std::set<std::string> vouched = Vouched(event.shard_verified());
      verified.insert(vouched.begin(), vouched.end());
    } else if (event.has_round_completed()) {
      const v1::RoundCompleted& round = event.round_completed();
      RoundCompleted(round.round(), {round.unverified_workers().begin(), round.unverified_workers().end()},
                     verified);
      verified.clear();
    } else if (event.has_worker_quarantined() && event.worker_quarantined().has_rolled_back_to_round()) {
      RolledBack(event.worker_quarantined().rolled_back_to_round());
      verified.clear();
    }
  }
}

}  // namespace slimfit::server
