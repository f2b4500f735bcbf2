#include "server/round_collector.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "performer/file_backed_tensors.h"

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;
using Kind = SpotChecks::Decision::Kind;

constexpr int64_t kTokens = 10;

ShardResult Result(int64_t shard, float value, double loss = 5.0) {
  ShardResult r;
  r.summary.set_round(3);
  r.summary.set_parameter_version(9);
  r.summary.set_shard_id(shard);
  r.summary.set_token_count(kTokens);
  r.summary.set_loss_sum(loss);
  r.gradient = {at::full({2, 2}, value), at::full({3}, value)};
  return r;
}

class RoundCollectorTest : public ::testing::Test {
 protected:
  RoundCollector Collector(int shards, NormScreen* screen = nullptr) {
    return RoundCollector(3, 9, std::vector<int64_t>(static_cast<size_t>(shards), kTokens), {{2, 2}, {3}},
                          /*evaluate_only=*/false, /*normalizer=*/100, screen, 1e-4, at::kFloat);
  }
};

TEST_F(RoundCollectorTest, UncheckedResultsCountOnceAndInvalidOnesNever) {
  RoundCollector collector = Collector(2);
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 1.0f)).ok());
  EXPECT_EQ(collector.Accept("w-b", Result(0, 1.0f)).code(), absl::StatusCode::kAlreadyExists);  // harmless
  ShardResult stale = Result(1, 1.0f);
  stale.summary.set_round(2);
  absl::Status rejected = collector.Accept("w-b", stale);
  EXPECT_EQ(rejected.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(collector.complete());
  ASSERT_TRUE(collector.Accept("w-b", Result(1, 2.0f)).ok());
  ASSERT_TRUE(collector.complete());
  EXPECT_DOUBLE_EQ(collector.gradient()[1][0].item<double>(), 3.0);
  EXPECT_EQ(collector.contributions(),
            (std::map<std::string, std::set<int64_t>>{{"w-a", {0}}, {"w-b", {1}}}));
  EXPECT_TRUE(collector.TakeVerdicts().empty());
}

TEST_F(RoundCollectorTest, TheNormScreenRejectsAResultFarOutOfLine) {
  NormScreen screen(/*factor=*/30, /*window=*/64, /*min_history=*/2);
  RoundCollector collector = Collector(4, &screen);
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 1.0f)).ok());
  ASSERT_TRUE(collector.Accept("w-a", Result(1, 1.5f)).ok());
  absl::Status scaled = collector.Accept("w-liar", Result(2, 1000.0f));
  EXPECT_EQ(scaled.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(scaled.message(), HasSubstr("shard 2"));
  EXPECT_EQ(collector.Accept("w-liar", Result(2, 0.0f)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(collector.Accept("w-b", Result(2, 0.5f)).ok());
  ASSERT_TRUE(collector.Accept("w-b", Result(3, 2.0f)).ok());
  ASSERT_TRUE(collector.complete());
  EXPECT_DOUBLE_EQ(collector.gradient()[0][0][0].item<double>(), 5.0);
  EXPECT_EQ(collector.contributions().count("w-liar"), 0u);
}

TEST_F(RoundCollectorTest, AnAbandonedStreamedShardBlamesNoOne) {
  RoundCollector collector = Collector(2);
  {
    RoundCollector::StreamedShard broken(&collector, "w-broken", 0);
    ASSERT_TRUE(broken.Add(0, 0, at::ones({4})).ok());
  }
  {
    // Cancelled because of w-broken's taint, after some of its own values were summed.
    RoundCollector::StreamedShard cancelled(&collector, "w-honest", 1);
    ASSERT_TRUE(cancelled.Add(0, 0, at::ones({4})).ok());
    cancelled.Abandon();
  }
  EXPECT_THAT(collector.tainted(), HasSubstr("w-broken"));
  EXPECT_EQ(collector.tainting_workers(), (std::set<std::string>{"w-broken"}));
}

// Streams `result`'s gradient into `shard`, one tensor at a time, and finishes it.
absl::Status StreamWhole(RoundCollector::StreamedShard& shard, const ShardResult& result) {
  for (size_t i = 0; i < result.gradient.size(); ++i) {
    if (absl::Status s = shard.Add(i, 0, result.gradient[i].reshape({-1})); !s.ok()) return s;
  }
  return shard.Finish(result.summary);
}

TEST_F(RoundCollectorTest, AStreamedShardCountsAsAnAcceptedOneAndPassesTheSameScreen) {
  NormScreen screen(/*factor=*/30, /*window=*/64, /*min_history=*/2);
  RoundCollector collector = Collector(4, &screen);
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 1.0f)).ok());
  {
    RoundCollector::StreamedShard streamed(&collector, "w-b", 1);
    ASSERT_TRUE(StreamWhole(streamed, Result(1, 1.5f)).ok());
    EXPECT_FALSE(streamed.summed_uncounted());
  }
  {
    // Refused at its first values: nothing of it was summed, so the sum stays good.
    RoundCollector::StreamedShard refused(&collector, "w-nan", 2);
    EXPECT_EQ(refused.Add(0, 0, at::full({4}, NAN)).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(collector.tainted().empty());
  ASSERT_TRUE(collector.Accept("w-a", Result(2, 0.5f)).ok());
  {
    RoundCollector::StreamedShard streamed(&collector, "w-b", 3);
    ASSERT_TRUE(StreamWhole(streamed, Result(3, 2.0f)).ok());
  }
  ASSERT_TRUE(collector.complete());
  EXPECT_TRUE(collector.tainted().empty());
  EXPECT_DOUBLE_EQ(collector.gradient()[0][0][0].item<double>(), 5.0);
  EXPECT_DOUBLE_EQ(collector.loss_sum(), 20.0);
  EXPECT_EQ(collector.contributions(),
            (std::map<std::string, std::set<int64_t>>{{"w-a", {0, 2}}, {"w-b", {1, 3}}}));
}

TEST_F(RoundCollectorTest, AStreamedShardRefusedAtItsFirstValuesLeavesTheSumGood) {
  RoundCollector collector = Collector(2);
  collector.ExpectCheck(1);
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 1.0f)).ok());
  {
    RoundCollector::StreamedShard counted(&collector, "w-b", 0);  // counted already
    EXPECT_EQ(counted.Add(0, 0, at::ones({4})).code(), absl::StatusCode::kAlreadyExists);
    RoundCollector::StreamedShard checked(&collector, "w-b", 1);  // compared whole, never streamed
    absl::Status refused = checked.Add(0, 0, at::ones({4}));
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(refused.message(), HasSubstr("spot-checked"));
  }
  EXPECT_TRUE(collector.tainted().empty());
  EXPECT_DOUBLE_EQ(collector.gradient()[0][0][0].item<double>(), 1.0);
}

TEST_F(RoundCollectorTest, AStreamedShardThatFailsAfterSummingTaintsTheRound) {
  NormScreen screen(/*factor=*/30, /*window=*/64, /*min_history=*/2);
  RoundCollector collector = Collector(4, &screen);
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 1.0f)).ok());
  ASSERT_TRUE(collector.Accept("w-a", Result(1, 1.0f)).ok());
  {
    RoundCollector::StreamedShard broken(&collector, "w-broken", 2);
    ASSERT_TRUE(broken.Add(0, 0, at::ones({4})).ok());
    EXPECT_TRUE(broken.summed_uncounted());
  }  // its stream ended without a summary
  EXPECT_THAT(collector.tainted(),
              HasSubstr("shard 2 from w-broken: its stream failed after some of its values"));
  {
    RoundCollector::StreamedShard scaled(&collector, "w-liar", 3);
    absl::Status refused = StreamWhole(scaled, Result(3, 1000.0f));
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);  // the norm screen: a strike
    EXPECT_THAT(refused.message(), HasSubstr("shard 3"));
  }
  {
    RoundCollector::StreamedShard misnamed(&collector, "w-odd", 3);
    ASSERT_TRUE(misnamed.Add(0, 0, at::ones({4})).ok());
    ShardResult other = Result(2, 1.0f);
    EXPECT_THAT(misnamed.Finish(other.summary).message(), HasSubstr("the summary names shard 2"));
  }
  EXPECT_EQ(collector.tainting_workers(), (std::set<std::string>{"w-broken", "w-liar", "w-odd"}));
  EXPECT_THAT(collector.tainted(), HasSubstr("w-broken"));  // the first reason is kept
  EXPECT_EQ(collector.contributions().count("w-liar"), 0u);
  EXPECT_EQ(collector.contributions().count("w-broken"), 0u);
}

TEST_F(RoundCollectorTest, ACheckedShardCountsOnlyOnceTwoWorkersAgree) {
  RoundCollector collector = Collector(1);
  collector.ExpectCheck(0);
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 1.0f)).ok());
  EXPECT_FALSE(collector.complete());
  EXPECT_TRUE(collector.TakeVerdicts().empty());
  ASSERT_TRUE(collector.Accept("w-b", Result(0, 1.0f + 1e-7f)).ok());
  ASSERT_TRUE(collector.complete());
  std::vector<RoundCollector::Verdict> verdicts = collector.TakeVerdicts();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].decision.kind, Kind::kAgreed);
  EXPECT_EQ(verdicts[0].decision.workers, (std::vector<std::string>{"w-a", "w-b"}));
  EXPECT_EQ(collector.contributions(), (std::map<std::string, std::set<int64_t>>{{"w-a", {0}}}));
}

TEST_F(RoundCollectorTest, ADisagreementIsSettledByAThirdWorkerAndTheLiarsResultIsDropped) {
  RoundCollector collector = Collector(1);
  collector.ExpectCheck(0);
  ASSERT_TRUE(collector.Accept("w-liar", Result(0, 1.3f)).ok());
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 1.0f)).ok());
  std::vector<RoundCollector::Verdict> verdicts = collector.TakeVerdicts();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].decision.kind, Kind::kNeedsTiebreak);
  EXPECT_FALSE(collector.complete());
  ASSERT_TRUE(collector.Accept("w-b", Result(0, 1.0f)).ok());
  verdicts = collector.TakeVerdicts();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].decision.kind, Kind::kResolved);
  EXPECT_EQ(verdicts[0].decision.odd, "w-liar");
  ASSERT_TRUE(collector.complete());
  EXPECT_DOUBLE_EQ(collector.gradient()[0][1][1].item<double>(), 1.0);
  EXPECT_EQ(collector.contributions(), (std::map<std::string, std::set<int64_t>>{{"w-a", {0}}}));
}

TEST_F(RoundCollectorTest, AnAbandonedCheckCountsTheHeldResultOrTheNextOne) {
  RoundCollector collector = Collector(2);
  collector.ExpectCheck(0);
  collector.ExpectCheck(1);
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 1.0f)).ok());
  ASSERT_TRUE(collector.AbandonCheck(0).ok());  // held: counts now
  ASSERT_TRUE(collector.AbandonCheck(1).ok());  // nothing yet: the next result counts
  EXPECT_FALSE(collector.IsChecked(1));
  ASSERT_TRUE(collector.Accept("w-a", Result(1, 2.0f)).ok());
  ASSERT_TRUE(collector.complete());
  EXPECT_DOUBLE_EQ(collector.gradient()[1][2].item<double>(), 3.0);
  EXPECT_TRUE(collector.TakeVerdicts().empty());
}

}  // namespace
}  // namespace slimfit::server

namespace slimfit::server {
namespace {

// `r`'s tensors moved into files, as the dispatcher assembles a checked shard's where the
// coordinator offloads.
ShardResult InFiles(ShardResult r) {
  for (at::Tensor& t : r.gradient) {
    at::Tensor in_file = *performer::FileBackedZerosLike(::testing::TempDir(), t);
    in_file.copy_(t);
    performer::ReleaseResidentPages(in_file);
    t = in_file;
  }
  return r;
}

void ExpectNotResident(const ShardResult& r, const std::string& where) {
  for (size_t i = 0; i < r.gradient.size(); ++i) {
    ASSERT_TRUE(performer::IsFileBacked(r.gradient[i]));
    EXPECT_EQ(performer::ResidentBytes(r.gradient[i]), 0) << where << ", tensor " << i;
  }
}

TEST_F(RoundCollectorTest, CheckedResultsHeldInFilesLeaveTheResidentSetAfterEveryPass) {
  RoundCollector collector = Collector(1);
  collector.ExpectCheck(0);
  const ShardResult first = InFiles(Result(0, 1.0f));
  const ShardResult second = InFiles(Result(0, 1.0f + 1e-7f));
  ASSERT_TRUE(collector.Accept("w-a", first).ok());  // validated and screened, then held
  ExpectNotResident(first, "held");
  ASSERT_TRUE(collector.Accept("w-b", second).ok());  // compared, and the first summed
  ExpectNotResident(first, "summed");
  ExpectNotResident(second, "compared");
  ASSERT_TRUE(collector.complete());
  EXPECT_DOUBLE_EQ(collector.gradient()[1][2].item<double>(), 1.0);
}

}  // namespace
}  // namespace slimfit::server

namespace slimfit::server {
namespace {

TEST_F(RoundCollectorTest, ACheckedShardCountsWithTheNormOfTheAnswerThatWon) {
  NormScreen screen(/*factor=*/1e6, /*window=*/64, /*min_history=*/100);  // records, refuses nothing
  RoundCollector collector = Collector(1, &screen);
  collector.ExpectCheck(0);
  ASSERT_TRUE(collector.Accept("w-liar", Result(0, 1.3f)).ok());
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 1.0f)).ok());
  ASSERT_TRUE(collector.Accept("w-b", Result(0, 1.0f)).ok());
  ASSERT_TRUE(collector.complete());
  const ShardResult honest = Result(0, 1.0f);
  const double want = PerTokenGradientNorm(honest.gradient, /*normalizer=*/100, kTokens);
  ASSERT_EQ(screen.Snapshot().size(), 1u);
  EXPECT_DOUBLE_EQ(screen.Snapshot().front(), want);  // w-a's, not the liar's
}

TEST_F(RoundCollectorTest, AnAbandonedCheckCountsTheHeldResultWithItsOwnNorm) {
  NormScreen screen(/*factor=*/1e6, /*window=*/64, /*min_history=*/100);
  RoundCollector collector = Collector(1, &screen);
  collector.ExpectCheck(0);
  ASSERT_TRUE(collector.Accept("w-a", Result(0, 2.0f)).ok());
  ASSERT_TRUE(collector.AbandonCheck(0).ok());
  ASSERT_TRUE(collector.complete());
  ASSERT_EQ(screen.Snapshot().size(), 1u);
  EXPECT_DOUBLE_EQ(screen.Snapshot().front(), PerTokenGradientNorm(Result(0, 2.0f).gradient, 100, kTokens));
}

}  // namespace
}  // namespace slimfit::server
