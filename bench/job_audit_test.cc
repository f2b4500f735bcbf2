#include "bench/job_audit.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// A job of `rounds` rounds whose round r holds 1000 + r tokens and has loss 5 − r/10.
class JobAuditTest : public ::testing::Test {
 protected:
  v1::Job Finished(int64_t rounds, int64_t tokens_trained) {
    v1::Job job;
    job.set_job_id("job-000007");
    job.set_state(v1::JOB_STATE_SUCCEEDED);
    job.mutable_spec()->set_rounds(rounds);
    job.mutable_progress()->set_rounds_completed(rounds);
    job.mutable_progress()->set_tokens_trained(tokens_trained);
    return job;
  }
  static int64_t Tokens(int64_t round) { return 1000 + round; }
  static double Loss(int64_t round) { return 5.0 - static_cast<double>(round) / 10; }
  v1::JobEvent Round(int64_t round, uint64_t version, double loss_scale = 1.0) {
    v1::JobEvent event;
    event.set_sequence(++sequence_);
    v1::RoundCompleted* done = event.mutable_round_completed();
    done->set_round(round);
    done->set_parameter_version(version);
    done->set_tokens(Tokens(round));
    done->set_loss(Loss(round) * loss_scale);
    return event;
  }
  v1::JobEvent Checkpoint(int64_t round) {
    v1::JobEvent event;
    event.set_sequence(++sequence_);
    event.mutable_checkpoint_written()->set_round(round);
    return event;
  }
  v1::JobEvent Reassigned(const std::string& reason) {
    v1::JobEvent event;
    event.set_sequence(++sequence_);
    event.mutable_shard_reassigned()->set_reason(reason);
    return event;
  }
  // Rounds 1..rounds, undisturbed: versions 2, 3, ...
  std::vector<v1::JobEvent> Calm(int64_t rounds) {
    std::vector<v1::JobEvent> events;
    for (int64_t r = 1; r <= rounds; ++r) {
      events.push_back(Round(r, static_cast<uint64_t>(r) + 1));
      events.push_back(Checkpoint(r));
    }
    return events;
  }
  static int64_t TokensOf(int64_t rounds) {
    int64_t total = 0;
    for (int64_t r = 1; r <= rounds; ++r) total += Tokens(r);
    return total;
  }

  int64_t sequence_ = 0;
};

TEST_F(JobAuditTest, AnUndisturbedJobPasses) {
  JobAudit audit = AuditJob(Finished(4, TokensOf(4)), Calm(4), JobAuditOptions());
  EXPECT_THAT(audit.problems, IsEmpty());
  EXPECT_EQ(audit.tokens_of_rounds, TokensOf(4));
  EXPECT_EQ(audit.checkpoints, 4);
  EXPECT_EQ(audit.resumes, 0);
  EXPECT_THAT(audit.redone_rounds, IsEmpty());
}

TEST_F(JobAuditTest, ARoundRedoneAfterARestartCountsOnceAndShowsAsAResume) {
  // Round 3 completed (version 4), the coordinator died before its checkpoint, resumed from round 2
  // as version 5 and redid round 3 (version 6) from the same parameters: the same loss.
  std::vector<v1::JobEvent> events = {Round(1, 2), Checkpoint(1), Round(2, 3), Checkpoint(2), Round(3, 4),
                                      Round(3, 6), Checkpoint(3), Round(4, 7), Checkpoint(4)};
  JobAudit audit = AuditJob(Finished(4, TokensOf(4)), events, JobAuditOptions());
  EXPECT_THAT(audit.problems, IsEmpty());
  EXPECT_THAT(audit.redone_rounds, ElementsAre(3));
  EXPECT_EQ(audit.round_records.at(3).completions, 2);
  EXPECT_EQ(audit.resumes, 1);
}

TEST_F(JobAuditTest, TokensCountedTwiceAreAProblem) {
  JobAudit audit = AuditJob(Finished(4, TokensOf(4) + Tokens(3)), Calm(4), JobAuditOptions());
  ASSERT_THAT(audit.problems, SizeIs(1));
  EXPECT_THAT(audit.problems[0], HasSubstr("counted twice or lost"));
}

TEST_F(JobAuditTest, ARedoFromOtherParametersIsAProblem) {
  std::vector<v1::JobEvent> events = {Round(1, 2), Round(2, 3), Round(2, 5, /*loss_scale=*/1.001)};
  JobAudit audit = AuditJob(Finished(2, TokensOf(2)), events, JobAuditOptions());
  ASSERT_THAT(audit.problems, SizeIs(1));
  EXPECT_THAT(audit.problems[0], HasSubstr("round 2 was redone with loss"));
  EXPECT_NEAR(audit.largest_redo_loss_difference, 1e-3, 1e-6);
}

TEST_F(JobAuditTest, MissingRoundsFailuresAndQuarantinesAreProblems) {
  v1::Job job = Finished(3, TokensOf(2));
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_state_reason("round 3: shard 0 failed 5 times");
  job.mutable_progress()->set_rounds_completed(2);
  std::vector<v1::JobEvent> events = Calm(2);
  v1::JobEvent quarantined;
  quarantined.mutable_worker_quarantined()->set_worker_id("w-0000abcd");
  quarantined.mutable_worker_quarantined()->set_reason("gradient disagrees");
  events.push_back(quarantined);
  v1::JobEvent disagreed;
  disagreed.mutable_shard_verified()->set_agreed(false);
  events.push_back(disagreed);
  JobAudit audit = AuditJob(job, events, JobAuditOptions());
  EXPECT_EQ(audit.quarantines, 1);
  EXPECT_EQ(audit.disagreements, 1);
  std::string all;
  for (const std::string& problem : audit.problems) all += problem + "\n";
  EXPECT_THAT(all, HasSubstr("w-0000abcd was quarantined"));
  EXPECT_THAT(all, HasSubstr("disagreeing"));
  EXPECT_THAT(all, HasSubstr("JOB_STATE_FAILED: round 3: shard 0 failed 5 times"));
  EXPECT_THAT(all, HasSubstr("completed 2 rounds; its spec asks for 3"));
  EXPECT_THAT(all, HasSubstr("1 rounds have no RoundCompleted event, the first 3"));
}

TEST_F(JobAuditTest, ReassignmentsGroupByCause) {
  std::vector<v1::JobEvent> events = Calm(1);
  events.push_back(Reassigned("worker w-12345678 stopped heartbeating; its call was cancelled"));
  events.push_back(Reassigned("worker w-9abcdef0 stopped heartbeating; its call was cancelled"));
  events.push_back(
      Reassigned("worker w-9abcdef0: failed to connect to all addresses; last error: "
                 "ipv4:127.0.0.1:40211: Connection refused"));
  JobAudit audit = AuditJob(Finished(1, TokensOf(1)), events, JobAuditOptions());
  EXPECT_EQ(audit.reassigned_shards, 3);
  EXPECT_EQ(audit.reassigned_by_cause.at("worker w-… stopped heartbeating; its call was cancelled"), 2);
  EXPECT_EQ(audit.reassigned_by_cause.at(
                "worker w-…: failed to connect to all addresses; last error: HOST:PORT: Connection refused"),
            1);
  EXPECT_THAT(audit.problems, IsEmpty());
}

TEST_F(JobAuditTest, TheReferenceRunMustAgreeRoundByRound) {
  const JobAudit reference = AuditJob(Finished(3, TokensOf(3)), Calm(3), JobAuditOptions());
  JobAudit close = AuditJob(Finished(3, TokensOf(3)),
                            {Round(1, 2), Round(2, 3, 1 + 1e-7), Round(3, 4, 1 - 2e-7)}, JobAuditOptions());
  CompareWithReference(reference, JobAuditOptions(), &close);
  EXPECT_THAT(close.problems, IsEmpty());
  EXPECT_EQ(close.largest_reference_loss_difference_round, 3);
  EXPECT_NEAR(close.largest_reference_loss_difference, 2e-7, 1e-9);
  EXPECT_EQ(close.reference_loss_differences.size(), 3u);
  EXPECT_NEAR(close.reference_loss_differences.at(2), 1e-7, 1e-9);

  JobAudit apart =
      AuditJob(Finished(3, TokensOf(3)), {Round(1, 2), Round(2, 3), Round(3, 4, 1.01)}, JobAuditOptions());
  CompareWithReference(reference, JobAuditOptions(), &apart);
  ASSERT_THAT(apart.problems, SizeIs(1));
  EXPECT_THAT(apart.problems[0], HasSubstr("round 3's loss"));

  JobAudit longer = AuditJob(Finished(3, TokensOf(3) + 5), Calm(3), JobAuditOptions());
  CompareWithReference(reference, JobAuditOptions(), &longer);
  EXPECT_THAT(longer.problems, ::testing::Contains(HasSubstr("the reference job-000007 on")));
}

}  // namespace
}  // namespace slimfit::bench
