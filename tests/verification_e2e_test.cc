// End to end, workers that lie (tests/lying_proxy.h puts a tampering proxy in front of a real
// worker): results that fail validation or the norm screen get their worker quarantined, a subtle
// lie is caught by a second opinion and settled by a third (and, caught late, undone back to the
// checkpoint before its first unverified round), a shard summed as it arrived that fails midway
// makes its round run again, and in every case the job's result is what one honest process
// computes. Two workers that disagree with no third to decide fail the job with a message that
// names them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rpc/rpc_util.h"
#include "server/spot_checks.h"
#include "tests/cluster.h"
#include "tests/e2e_support.h"
#include "tests/lying_proxy.h"

namespace slimfit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::Cluster;
using testing_util::Lie;
using testing_util::LyingProxy;

// Starts a worker behind a proxy that tells `lie`.
std::unique_ptr<LyingProxy> StartLiar(Cluster& cluster, const std::string& budget, Lie lie) {
  absl::StatusOr<std::unique_ptr<LyingProxy>> proxy = LyingProxy::Start(lie);
  EXPECT_TRUE(proxy.ok()) << proxy.status();
  if (!proxy.ok()) return nullptr;
  testing_util::WorkerOptions options;
  options.extra_flags = {absl::StrCat("--advertise=", (*proxy)->address())};
  absl::StatusOr<int> index = cluster.StartWorker(budget, options);
  EXPECT_TRUE(index.ok()) << index.status() << cluster.Logs();
  if (!index.ok()) return nullptr;
  (*proxy)->SetUpstream(cluster.worker_address(*index));
  return *std::move(proxy);
}

// The registered worker id behind `address` (what the worker advertised).
std::string WorkerIdAt(Cluster& cluster, const std::string& address) {
  auto context = rpc::MakeClientContext(testing_util::kClientToken, std::chrono::seconds(10));
  v1::ListWorkersResponse workers;
  grpc::Status status = cluster.Stub()->ListWorkers(context.get(), v1::ListWorkersRequest(), &workers);
  EXPECT_TRUE(status.ok()) << status.error_message();
  for (const v1::WorkerInfo& worker : workers.workers()) {
    if (worker.advertise_address() == address) return worker.worker_id();
  }
  ADD_FAILURE() << "no worker advertises " << address;
  return "";
}

// Honest workers on `honest_budgets` and one liar on 4 MiB, all live; `liar` is null on failure.
struct WithOneLiar {
  std::unique_ptr<LyingProxy> liar;
  std::string liar_id;
};
WithOneLiar StartHonestAndOneLiar(Cluster& cluster, const std::vector<std::string>& honest_budgets, Lie lie) {
  WithOneLiar result;
  for (const std::string& budget : honest_budgets) {
    absl::StatusOr<int> index = cluster.StartWorker(budget);
    EXPECT_TRUE(index.ok()) << index.status() << cluster.Logs();
    if (!index.ok()) return result;
  }
  std::unique_ptr<LyingProxy> liar = StartLiar(cluster, "4MiB", lie);
  if (!liar) return result;
  const absl::Status live =
      cluster.WaitForLiveWorkers(static_cast<int>(honest_budgets.size()) + 1, absl::Seconds(30));
  EXPECT_TRUE(live.ok()) << live << cluster.Logs();
  if (!live.ok()) return result;
  result.liar_id = WorkerIdAt(cluster, liar->address());
  result.liar = std::move(liar);
  return result;
}

struct Finished {
  v1::Job job;
  std::vector<v1::JobEvent> events;
};

Finished RunJob(Cluster& cluster, const v1::JobSpec& spec) {
  Finished finished;
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  EXPECT_TRUE(job.ok()) << job.status() << cluster.Logs();
  if (!job.ok()) return finished;
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(240));
  EXPECT_TRUE(done.ok()) << done.status() << cluster.Logs();
  if (!done.ok()) return finished;
  finished.job = *done;
  finished.events = testing_util::AllEvents(cluster, job->job_id());
  return finished;
}

TEST(VerificationEndToEndTest, RejectedResultsGetTheirWorkerQuarantinedAndChangeNothing) {
  Cluster cluster("quarantine");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (const char* budget : {"700KiB", "4MiB"})
    ASSERT_TRUE(cluster.StartWorker(budget).ok()) << cluster.Logs();
  std::unique_ptr<LyingProxy> nan = StartLiar(cluster, "4MiB", Lie{Lie::Kind::kNotFinite, 0, 2});
  std::unique_ptr<LyingProxy> scaled = StartLiar(cluster, "4MiB", Lie{Lie::Kind::kScale, 1000, 3});
  std::unique_ptr<LyingProxy> stale = StartLiar(cluster, "4MiB", Lie{Lie::Kind::kWrongVersion, 0, 2});
  ASSERT_TRUE(nan && scaled && stale);
  ASSERT_TRUE(cluster.WaitForLiveWorkers(5, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::map<std::string, std::string> liars = {{WorkerIdAt(cluster, nan->address()), "not finite"},
                                                    {WorkerIdAt(cluster, scaled->address()), "out of line"},
                                                    {WorkerIdAt(cluster, stale->address()), "version"}};

  const std::string text = testing_util::Corpus(16000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  v1::JobSpec spec = testing_util::Spec(*dataset, 32, 64, 128, 10, 5);
  spec.set_verify_fraction(0);  // the validation and the norm screen alone
  spec.set_quarantine_after(2);
  const Finished finished = RunJob(cluster, spec);
  ASSERT_EQ(finished.job.state(), v1::JOB_STATE_SUCCEEDED) << finished.job.state_reason() << cluster.Logs();

  std::map<std::string, std::string> quarantined;
  for (const v1::JobEvent& event : finished.events) {
    if (event.has_worker_quarantined()) {
      quarantined[event.worker_quarantined().worker_id()] = event.worker_quarantined().reason();
      EXPECT_THAT(event.worker_quarantined().reason(), HasSubstr("2 results rejected"));
    }
    // A quarantined worker's results never counted, so nothing had to be computed again.
    if (event.has_worker_quarantined()) {
      EXPECT_EQ(event.worker_quarantined().recomputed_shards(), 0);
    }
  }
  ASSERT_EQ(quarantined.size(), liars.size()) << cluster.Logs();
  for (const auto& [worker_id, why] : liars) {
    ASSERT_EQ(quarantined.count(worker_id), 1u) << worker_id;
    EXPECT_THAT(quarantined[worker_id], HasSubstr(why));
  }
  for (const LyingProxy* liar : {nan.get(), scaled.get(), stale.get()}) EXPECT_GE(liar->lies_told(), 2);
  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, finished.job.job_id(), spec, text,
                                                    std::string("\n\n")),
            1e-5);
}

TEST(VerificationEndToEndTest, ASubtleLieIsOutvotedBySpotChecksAndChangesNothing) {
  Cluster cluster("spot_checks");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  // Different budgets: the honest workers run different plans and still agree.
  const WithOneLiar started =
      StartHonestAndOneLiar(cluster, {"700KiB", "4MiB"}, Lie{Lie::Kind::kScale, 1.01, 1});
  ASSERT_TRUE(started.liar);
  const std::string& liar_id = started.liar_id;

  const std::string text = testing_util::Corpus(16000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  v1::JobSpec spec = testing_util::Spec(*dataset, 32, 64, 128, 8, 3);
  spec.set_verify_fraction(1);  // every shard gets a second opinion
  const Finished finished = RunJob(cluster, spec);
  ASSERT_EQ(finished.job.state(), v1::JOB_STATE_SUCCEEDED) << finished.job.state_reason() << cluster.Logs();

  int agreed = 0, outvoted = 0, quarantines = 0;
  double largest_honest_difference = 0;
  for (const v1::JobEvent& event : finished.events) {
    if (event.has_shard_verified()) {
      const v1::ShardVerified& verified = event.shard_verified();
      if (verified.agreed()) {
        ++agreed;
        largest_honest_difference = std::max(largest_honest_difference, verified.relative_difference());
      } else {
        ++outvoted;
        EXPECT_EQ(verified.odd_worker_id(), liar_id);
        EXPECT_EQ(verified.worker_ids_size(), 3);
      }
      EXPECT_LE(verified.relative_difference(), verified.tolerance());
    }
    if (event.has_worker_quarantined()) {
      ++quarantines;
      EXPECT_EQ(event.worker_quarantined().worker_id(), liar_id);
      EXPECT_THAT(event.worker_quarantined().reason(), HasSubstr("outvoted"));
    }
    if (event.has_round_completed()) {
      EXPECT_EQ(event.round_completed().verified_shards(), event.round_completed().shards());
    }
  }
  EXPECT_GE(outvoted, 1);  // every shard it had a hand in before the quarantine
  EXPECT_EQ(quarantines, 1);
  EXPECT_GT(agreed, 0);
  EXPECT_GT(largest_honest_difference, 0);     // different plans round differently...
  EXPECT_LT(largest_honest_difference, 1e-5);  // ...by far less than the tolerance
  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, finished.job.job_id(), spec, text,
                                                    std::string("\n\n")),
            1e-5);
}

// Shards summed as they arrive (--stream_into_sum_bytes=0: every shard) cannot be taken back out:
// a stream broken midway, or a result refused by the norm screen after its values were summed,
// makes the coordinator compute the round again (and assemble that worker's shards from then on),
// and the job's result is still what one honest process computes.
TEST(VerificationEndToEndTest, AShardThatFailsAfterItsValuesWereSummedMakesTheRoundRunAgain) {
  Cluster cluster("streamed_sum");
  ASSERT_TRUE(cluster.StartCoordinator({"--stream_into_sum_bytes=0"}).ok()) << cluster.Logs();
  for (const char* budget : {"700KiB", "4MiB"})
    ASSERT_TRUE(cluster.StartWorker(budget).ok()) << cluster.Logs();
  std::unique_ptr<LyingProxy> breaker = StartLiar(cluster, "4MiB", Lie{Lie::Kind::kBreakStream, 0, 2});
  std::unique_ptr<LyingProxy> scaled = StartLiar(cluster, "4MiB", Lie{Lie::Kind::kScale, 1000, 3});
  ASSERT_TRUE(breaker && scaled);
  ASSERT_TRUE(cluster.WaitForLiveWorkers(4, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string breaker_id = WorkerIdAt(cluster, breaker->address());
  const std::string scaled_id = WorkerIdAt(cluster, scaled->address());

  const std::string text = testing_util::Corpus(16000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  v1::JobSpec spec = testing_util::Spec(*dataset, 32, 64, 128, 10, 5);
  spec.set_verify_fraction(0);  // every shard streams into the sum
  spec.set_quarantine_after(2);
  const Finished finished = RunJob(cluster, spec);
  ASSERT_EQ(finished.job.state(), v1::JOB_STATE_SUCCEEDED) << finished.job.state_reason() << cluster.Logs();

  const std::string logs = cluster.Logs();
  // Each tainted the sum once; after that its shards were assembled first, and nothing it sent
  // was summed again.
  for (const std::string& id : {breaker_id, scaled_id}) {
    EXPECT_THAT(logs, HasSubstr(absl::StrCat(id, ": assembled before summing from now on"))) << logs;
  }
  EXPECT_THAT(logs, HasSubstr("its stream failed after some of its values were summed"));
  EXPECT_THAT(logs, HasSubstr("refused after its values were summed"));
  EXPECT_THAT(logs, HasSubstr("computing it again"));
  EXPECT_GE(breaker->lies_told(), 1);
  EXPECT_GE(scaled->lies_told(), 2);
  bool scaled_quarantined = false;
  int recomputations = 0, streamed = 0;
  for (const v1::JobEvent& event : finished.events) {
    if (event.has_round_completed()) {
      recomputations += event.round_completed().recomputations();
      streamed += event.round_completed().streamed_shards();
    }
    if (event.has_worker_quarantined()) {
      EXPECT_EQ(event.worker_quarantined().worker_id(), scaled_id);  // a broken stream is no strike
      scaled_quarantined = true;
    }
  }
  EXPECT_TRUE(scaled_quarantined);
  // Each started a round over once (the same round, should both have tainted it), never again.
  EXPECT_GE(recomputations, 1) << logs;
  EXPECT_LE(recomputations, 2) << logs;
  EXPECT_GT(streamed, 0);  // the honest workers' shards, in every round but the ones computed again
  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, finished.job.job_id(), spec, text,
                                                    std::string("\n\n")),
            1e-5);
}

// Once the round's sum is tainted the round will be computed again: the wave's other calls are
// cancelled at once rather than waited for — here a worker holding its call for two minutes — and
// the job still equals one process.
TEST(VerificationEndToEndTest, ATaintedRoundCancelsTheCallsStillInFlight) {
  Cluster cluster("tainted_cancels");
  ASSERT_TRUE(cluster.StartCoordinator({"--stream_into_sum_bytes=0"}).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  std::unique_ptr<LyingProxy> breaker = StartLiar(cluster, "4MiB", Lie{Lie::Kind::kBreakStream, 0, 2});
  Lie stall{Lie::Kind::kStall, 0, 2};
  stall.stall_seconds = 120;
  std::unique_ptr<LyingProxy> staller = StartLiar(cluster, "4MiB", stall);
  ASSERT_TRUE(breaker && staller);
  ASSERT_TRUE(cluster.WaitForLiveWorkers(3, absl::Seconds(30)).ok()) << cluster.Logs();

  const std::string text = testing_util::Corpus(16000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  v1::JobSpec spec = testing_util::Spec(*dataset, 32, 64, 128, 6, 3);
  spec.set_verify_fraction(0);  // every shard streams into the sum
  const Finished finished = RunJob(cluster, spec);
  ASSERT_EQ(finished.job.state(), v1::JOB_STATE_SUCCEEDED) << finished.job.state_reason() << cluster.Logs();

  const std::string logs = cluster.Logs();
  // Round 2's first wave: the breaker tainted the sum while the staller held its call, which the
  // coordinator then cancelled (without that, the wave waited until the held call ended).
  EXPECT_EQ(staller->lies_told(), 1) << logs;
  EXPECT_EQ(staller->stalls_cancelled(), 1) << logs;
  // At the taint, moments after the wave began: not at the shard's deadline (60 s in these clusters)
  // nor when the held connection is dropped for its keepalive pings (~20 s here), which end it too.
  EXPECT_LT(staller->last_stall_seconds(), 10) << logs;
  EXPECT_THAT(logs, HasSubstr(" of the wave's calls abandoned")) << logs;
  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, finished.job.job_id(), spec, text,
                                                    std::string("\n\n")),
            1e-5);
}

// A result that arrived whole counts even when its call then ends badly (the connection lost after
// the summary): no round is computed again, the worker is not struck, and the job equals one
// process.
TEST(VerificationEndToEndTest, AResultThatArrivedWholeCountsWhenItsCallThenFails) {
  Cluster cluster("whole_then_failed");
  ASSERT_TRUE(cluster.StartCoordinator({"--stream_into_sum_bytes=0"}).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  std::unique_ptr<LyingProxy> failing = StartLiar(cluster, "4MiB", Lie{Lie::Kind::kFailAfterSummary, 0, 2});
  ASSERT_TRUE(failing);
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();

  const std::string text = testing_util::Corpus(16000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  v1::JobSpec spec = testing_util::Spec(*dataset, 32, 64, 128, 4, 5);
  spec.set_verify_fraction(0);  // every shard streams into the sum
  spec.set_quarantine_after(1);
  const Finished finished = RunJob(cluster, spec);
  ASSERT_EQ(finished.job.state(), v1::JOB_STATE_SUCCEEDED) << finished.job.state_reason() << cluster.Logs();

  const std::string logs = cluster.Logs();
  EXPECT_GE(failing->lies_told(), 1);
  EXPECT_THAT(logs, HasSubstr("after the whole result arrived; the result counts")) << logs;
  EXPECT_THAT(logs, Not(HasSubstr("computing it again"))) << logs;
  int recomputations = 0, streamed = 0;
  for (const v1::JobEvent& event : finished.events) {
    EXPECT_FALSE(event.has_worker_quarantined());
    if (event.has_round_completed()) {
      recomputations += event.round_completed().recomputations();
      streamed += event.round_completed().streamed_shards();
    }
  }
  EXPECT_EQ(recomputations, 0) << logs;
  EXPECT_GT(streamed, 0);
  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, finished.job.job_id(), spec, text,
                                                    std::string("\n\n")),
            1e-5);
}

// A seed under which, with `fraction`, every one of `shards` shards is spot-checked in the rounds
// of `checked` and none in the rounds of `unchecked`.
uint64_t SeedWithChecks(double fraction, int64_t shards, const std::vector<int64_t>& checked,
                        const std::vector<int64_t>& unchecked) {
  for (uint64_t seed = 0;; ++seed) {
    bool fits = true;
    for (int64_t shard = 0; shard < shards && fits; ++shard) {
      for (int64_t round : checked) fits &= server::IsSpotChecked(seed, round, shard, fraction);
      for (int64_t round : unchecked) fits &= !server::IsSpotChecked(seed, round, shard, fraction);
    }
    if (fits) return seed;
  }
}

TEST(VerificationEndToEndTest, ALiarCaughtLateIsUndoneFromItsFirstUnverifiedRound) {
  Cluster cluster("rollback");
  // Three equal workers and six sequences per round: three shards, one per worker.
  ASSERT_TRUE(cluster.StartCoordinator({"--max_sequences_per_shard=2"}).ok()) << cluster.Logs();
  const WithOneLiar started =
      StartHonestAndOneLiar(cluster, {"4MiB", "4MiB"}, Lie{Lie::Kind::kScale, 1.01, 2});
  ASSERT_TRUE(started.liar);
  const std::string& liar_id = started.liar_id;

  const std::string text = testing_util::Corpus(16000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  v1::JobSpec spec = testing_util::Spec(*dataset, 32, 64, 128, 6, 4);
  // Round 1 is checked (the liar, still honest, is vouched for), round 2 is not (its lie counts),
  // round 3 is (it is caught): everything since round 2 must be undone.
  spec.set_verify_fraction(0.5);
  spec.set_seed(SeedWithChecks(0.5, 3, {1, 3}, {2}));
  const Finished finished = RunJob(cluster, spec);
  ASSERT_EQ(finished.job.state(), v1::JOB_STATE_SUCCEEDED) << finished.job.state_reason() << cluster.Logs();

  int quarantines = 0, round_two_completions = 0;
  bool liar_unverified_in_round_two = false;
  // Round 2's checkpoint with the lie is written while round 3 runs: recorded before the rollback
  // is announced (then voided by it, also on a restart), or dropped unrecorded — never recorded
  // after the announcement, before round 2 was computed again (a restart would not void it).
  int checkpoints_between_rollback_and_recompute = 0;
  for (const v1::JobEvent& event : finished.events) {
    if (event.has_checkpoint_written() && event.checkpoint_written().round() >= 2 && quarantines == 1 &&
        round_two_completions == 1) {
      ++checkpoints_between_rollback_and_recompute;
    }
    if (event.has_worker_quarantined()) {
      ++quarantines;
      const v1::WorkerQuarantined& quarantined = event.worker_quarantined();
      EXPECT_EQ(quarantined.worker_id(), liar_id);
      EXPECT_EQ(quarantined.round(), 3);
      EXPECT_EQ(quarantined.recompute_from_round(), 2);
      EXPECT_EQ(quarantined.rolled_back_to_round(), 1);
    }
    if (event.has_round_completed() && event.round_completed().round() == 2) {
      ++round_two_completions;
      for (const std::string& worker : event.round_completed().unverified_workers()) {
        liar_unverified_in_round_two |= worker == liar_id;
      }
    }
  }
  EXPECT_EQ(quarantines, 1) << cluster.Logs();
  EXPECT_EQ(round_two_completions, 2);  // once with the lie, once again without the liar
  EXPECT_TRUE(liar_unverified_in_round_two);
  EXPECT_EQ(checkpoints_between_rollback_and_recompute, 0) << cluster.Logs();
  EXPECT_GE(started.liar->lies_told(), 2);
  // Every checkpoint the job keeps is of the recomputed rounds: the result is the honest one.
  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, finished.job.job_id(), spec, text,
                                                    std::string("\n\n")),
            1e-5);
}

TEST(VerificationEndToEndTest, ADisagreementWithNoThirdWorkerFailsTheJobNamingBoth) {
  Cluster cluster("no_tiebreak");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  const WithOneLiar started = StartHonestAndOneLiar(cluster, {"4MiB"}, Lie{Lie::Kind::kScale, 1.01, 1});
  ASSERT_TRUE(started.liar);
  const std::string& liar_id = started.liar_id;

  absl::StatusOr<std::string> dataset = cluster.UploadText(testing_util::Corpus(8000), std::nullopt);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  v1::JobSpec spec = testing_util::Spec(*dataset, 32, 64, 128, 4, 2);
  spec.set_verify_fraction(1);
  const Finished finished = RunJob(cluster, spec);
  ASSERT_EQ(finished.job.state(), v1::JOB_STATE_FAILED) << cluster.Logs();
  EXPECT_THAT(finished.job.state_reason(), HasSubstr("disagree and no other eligible worker is live"));
  EXPECT_THAT(finished.job.state_reason(), HasSubstr(liar_id));
}

}  // namespace
}  // namespace slimfit
