#include "server/verification_ledger.h"

#include <gtest/gtest.h>

namespace slimfit::server {
namespace {

TEST(VerificationLedgerTest, ASuspectStaysSuspectFromItsFirstUnverifiedRoundUntilAVerification) {
  VerificationLedger ledger;
  ledger.RoundCompleted(1, {"w-a"}, {});
  ledger.RoundCompleted(2, {"w-a", "w-b"}, {});
  EXPECT_EQ(ledger.SuspectSince("w-a"), 1);
  EXPECT_EQ(ledger.SuspectSince("w-b"), 2);
  EXPECT_EQ(ledger.SuspectSince("w-c"), 0);
  ledger.RoundCompleted(3, {}, {"w-a"});  // all of w-a's results in round 3 were verified
  EXPECT_EQ(ledger.SuspectSince("w-a"), 0);
  ledger.RoundCompleted(4, {"w-b"}, {"w-b"});  // verified once, but unverified results counted too
  EXPECT_EQ(ledger.SuspectSince("w-b"), 4);
}

TEST(VerificationLedgerTest, ARollbackVoidsSuspicionOfTheRoundsComputedAgain) {
  VerificationLedger ledger;
  ledger.RoundCompleted(2, {"w-a"}, {});
  ledger.RoundCompleted(5, {"w-b"}, {});
  ledger.RolledBack(3);
  EXPECT_EQ(ledger.SuspectSince("w-a"), 2);
  EXPECT_EQ(ledger.SuspectSince("w-b"), 0);
}

TEST(VerificationLedgerTest, ReplayingTheEventsRebuildsTheLedger) {
  std::vector<v1::JobEvent> events(6);
  events[0].mutable_round_completed()->set_round(1);
  events[0].mutable_round_completed()->add_unverified_workers("w-a");
  events[0].mutable_round_completed()->add_unverified_workers("w-b");
  v1::ShardVerified* check = events[1].mutable_shard_verified();
  check->set_round(2);
  check->add_worker_ids("w-a");
  check->add_worker_ids("w-c");
  check->add_worker_ids("w-b");
  check->set_odd_worker_id("w-c");
  events[2].mutable_round_completed()->set_round(2);
  events[2].mutable_round_completed()->add_unverified_workers("w-c");
  events[3].mutable_round_completed()->set_round(3);
  events[3].mutable_round_completed()->add_unverified_workers("w-d");
  events[4].mutable_worker_quarantined()->set_worker_id("w-c");
  events[4].mutable_worker_quarantined()->set_rolled_back_to_round(2);
  events[5].mutable_round_completed()->set_round(3);
  events[5].mutable_round_completed()->add_unverified_workers("w-e");
  VerificationLedger ledger;
  ledger.Replay(events);
  EXPECT_EQ(ledger.SuspectSince("w-a"), 0);  // vouched for by round 2's check
  EXPECT_EQ(ledger.SuspectSince("w-b"), 0);
  EXPECT_EQ(ledger.SuspectSince("w-c"), 2);
  EXPECT_EQ(ledger.SuspectSince("w-d"), 0);  // its round 3 was computed again
  EXPECT_EQ(ledger.SuspectSince("w-e"), 3);
}

}  // namespace
}  // namespace slimfit::server
