// JobRunner after a spot check catches a worker whose earlier results were accepted unverified
// (JobSpec.verify_fraction; server/spot_checks.h, server/verification_ledger.h): the worker is
// quarantined, the job goes back to the newest checkpoint before the first round its unverified
// results went into, computes the rounds since again without it, and ends with the parameters an
// optimizer stepped here on the exact, honest whole-batch gradients gives. The events say so
// (ShardVerified with the odd worker, WorkerQuarantined with recompute_from_round and
// rolled_back_to_round, JobResumed REASON_ROLLBACK, RoundCompleted.rerun).
//
// In-process: three TestWorkerServices (real engine gradients over gRPC in-process channels), one
// of which lies (TestWorkerService::kLies: its gradient scaled by 1.5); which shards are checked
// is drawn from the job's seed (IsSpotChecked), chosen so that the lie goes in unchecked first and
// is caught later. No test sleeps.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/job_runner_test_fixture.h"
#include "server/spot_checks.h"

namespace slimfit::server {
namespace {

using Behaviour = TestWorkerService::Behaviour;

// The draw of spot-checked shards (IsSpotChecked(seed, round, shard, fraction)) for this seed and
// fraction: in rounds 1 and 2 no shard is checked (every draw ≥ 0.49), in round 3 every one is
// (every draw < 0.27) — so whichever shards the liar gets (the registry's worker ids, which order
// the plans, are random) its lies of round 2 count unverified and it is caught in round 3. The
// test asserts this draw first, so that a change to the sampling shows up as that, not as a
// mystery.
constexpr uint64_t kSeed = 19199;
constexpr double kVerifyFraction = 0.4;
// A round of 4 sequences has at most 4 shards (in fact one per worker: each worker's share fits
// one request), ids 0..3.
constexpr int64_t kShards = 4;

class JobRunnerRollbackTest : public JobRunnerFixture {
 protected:
  void SetUp() override {
    JobRunnerFixture::SetUp();
    v1::JobSpec& spec = *job_.mutable_spec();
    spec.set_rounds(3);
    spec.set_checkpoint_interval_rounds(1);
    spec.set_seed(kSeed);
    spec.set_verify_fraction(kVerifyFraction);
    ASSERT_TRUE(store_->PutJob(job_).ok());
  }
};

TEST_F(JobRunnerRollbackTest, ALiarCaughtLateIsQuarantinedAndItsUnverifiedRoundsAreComputedAgain) {
  for (int64_t shard = 0; shard < kShards; ++shard) {
    ASSERT_FALSE(IsSpotChecked(kSeed, 1, shard, kVerifyFraction)) << shard;
    ASSERT_FALSE(IsSpotChecked(kSeed, 2, shard, kVerifyFraction)) << shard;
    ASSERT_TRUE(IsSpotChecked(kSeed, 3, shard, kVerifyFraction)) << shard;
  }
  const Worker honest_a = AddWorker();
  const Worker honest_b = AddWorker();
  const Worker liar = AddWorker();
  // Round 1 without the liar (busy: UNAVAILABLE, which costs no attempt; its shards go to the
  // others), so that round 1's checkpoint is honest and its unverified results start in round 2:
  // the job must go back to round 1's checkpoint (the newest before round 2), neither to round 0's
  // nor to round 2's, which holds the lie. From round 2 on it lies. The observer runs on the
  // runner's thread as round 1 ends, before round 2's shards are sent.
  liar.service->SetBehaviour(Behaviour::kUnavailable);
  absl::Mutex mutex;
  int liar_calls_when_quarantined = -1;
  on_event_ = [&](const v1::JobEvent& event) {
    if (event.has_round_completed() && event.round_completed().round() == 1 &&
        !event.round_completed().rerun()) {
      liar.service->SetBehaviour(Behaviour::kLies);
    }
    if (event.has_worker_quarantined()) {
      absl::MutexLock lock(&mutex);
      liar_calls_when_quarantined = liar.service->calls();  // the round's waves are over by now
    }
  };
  ASSERT_TRUE(NewRunner().ok());
  runner_->Start();
  ASSERT_TRUE(runner_->AwaitTerminal(absl::Now() + kSafety));
  runner_->Stop();

  const v1::Job job = runner_->Snapshot();
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.state_reason();
  EXPECT_EQ(job.progress().rounds_completed(), 3);
  EXPECT_EQ(job.progress().parameters_round(), 3);

  // Round 1 once, round 2 twice (the second time a rerun), round 3 once: its first try ended in
  // the rollback.
  EXPECT_EQ(CompletedRounds(), (std::vector<int64_t>{1, 2, 2, 3}));
  std::vector<const v1::JobEvent*> quarantines, rollbacks;
  std::vector<v1::JobEvent> events = Events();
  std::set<std::string> caught_by;  // the workers that outvoted the liar
  for (const v1::JobEvent& event : events) {
    if (event.has_worker_quarantined()) quarantines.push_back(&event);
    if (event.has_resumed()) rollbacks.push_back(&event);
    if (event.has_round_completed()) {
      const v1::RoundCompleted& done = event.round_completed();
      const std::vector<std::string> unverified(done.unverified_workers().begin(),
                                                done.unverified_workers().end());
      // The liar's results counted unverified in round 2 only (round 1: busy; afterwards: out).
      if (done.round() == 2 && rollbacks.empty()) {
        EXPECT_THAT(unverified, ::testing::Contains(liar.id));
      } else {
        EXPECT_THAT(unverified, ::testing::Not(::testing::Contains(liar.id))) << done.round();
      }
      // Only round 2 runs again; round 3 never completed before the rollback.
      EXPECT_EQ(done.rerun(), done.round() == 2 && !rollbacks.empty()) << done.round();
    }
    if (event.has_shard_verified() && !event.shard_verified().agreed()) {
      const v1::ShardVerified& verified = event.shard_verified();
      EXPECT_EQ(verified.round(), 3);
      EXPECT_EQ(verified.odd_worker_id(), liar.id);
      for (const std::string& worker : verified.worker_ids()) {
        if (worker != liar.id) caught_by.insert(worker);
      }
    }
  }
  EXPECT_THAT(caught_by, ::testing::IsSubsetOf(std::set<std::string>{honest_a.id, honest_b.id}));
  EXPECT_FALSE(caught_by.empty());

  ASSERT_EQ(quarantines.size(), 1u);
  const v1::WorkerQuarantined& quarantined = quarantines[0]->worker_quarantined();
  EXPECT_EQ(quarantined.worker_id(), liar.id);
  EXPECT_EQ(quarantined.round(), 3);
  EXPECT_EQ(quarantined.recompute_from_round(), 2);
  EXPECT_EQ(quarantined.rolled_back_to_round(), 1);
  EXPECT_EQ(rollbacks.size(), 1u);
  if (rollbacks.size() == 1) {
    EXPECT_EQ(rollbacks[0]->resumed().reason(), v1::JobResumed::REASON_ROLLBACK);
    EXPECT_EQ(rollbacks[0]->resumed().round(), 1);
    EXPECT_EQ(rollbacks[0]->resumed().rounds_completed(), 2);
    EXPECT_LT(quarantines[0]->sequence(), rollbacks[0]->sequence());
  }
  // Quarantined for good: no shard of the job went to it afterwards.
  {
    absl::MutexLock lock(&mutex);
    EXPECT_EQ(liar.service->calls(), liar_calls_when_quarantined);
  }

  // Every round's parameters as if only honest workers had ever answered: the lie of round 2 is
  // undone, not just the round the liar was caught in.
  for (int64_t round : {1, 2, 3}) {
    absl::StatusOr<std::vector<at::Tensor>> written = CheckpointParameters(round);
    ASSERT_TRUE(written.ok()) << written.status();
    const std::vector<at::Tensor> expected = ReferenceParameters(round);
    ASSERT_EQ(written->size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(at::allclose((*written)[i], expected[i], 1e-4, 1e-6))
          << "round " << round << ", tensor " << i;
    }
  }
}

}  // namespace
}  // namespace slimfit::server
