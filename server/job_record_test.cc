#include "server/job_record.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace slimfit::server {
namespace {

class JobRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(testing_util::TempPath(
        absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db")));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    v1::Job job;
    job.set_job_id("job-000007");
    job.set_state(v1::JOB_STATE_QUEUED);
    ASSERT_TRUE(store_->PutJob(job).ok());
    record_ = std::make_unique<JobRecord>(job, 1, store_.get());
  }

  std::vector<v1::JobEvent> Events() {
    absl::StatusOr<std::vector<v1::JobEvent>> events = store_->Events("job-000007", 0, 100);
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? *events : std::vector<v1::JobEvent>{};
  }

  std::unique_ptr<StateStore> store_;
  std::unique_ptr<JobRecord> record_;
};

TEST_F(JobRecordTest, StateChangesAreStoredThenEmittedInSequence) {
  const uint64_t seen = record_->events().count();
  record_->SetState(v1::JOB_STATE_RUNNING, "running on 2 workers");
  EXPECT_GT(record_->events().count(), seen);
  record_->SetReason("waiting for 3 eligible workers (2 live)");  // stored, no event
  record_->SetState(v1::JOB_STATE_SUCCEEDED, "all 4 rounds done");
  const std::vector<v1::JobEvent> events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].sequence(), 1);
  EXPECT_EQ(events[0].state_changed().previous(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(events[0].state_changed().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(events[1].sequence(), 2);
  EXPECT_EQ(events[1].state_changed().reason(), "all 4 rounds done");
  absl::StatusOr<std::optional<v1::Job>> stored = store_->GetJob("job-000007");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE((*stored)->has_started_at());
  EXPECT_TRUE((*stored)->has_finished_at());
  EXPECT_TRUE(record_->terminal());
}

TEST_F(JobRecordTest, TheObserverSeesEveryEventAfterItIsStored) {
  std::vector<v1::JobEvent> observed;
  std::vector<size_t> stored_when_observed;
  v1::Job job;
  job.set_job_id("job-000007");
  job.set_state(v1::JOB_STATE_QUEUED);
  JobRecord record(job, 1, store_.get(), [&](const v1::JobEvent& event) {
    observed.push_back(event);
    stored_when_observed.push_back(Events().size());
  });
  record.SetState(v1::JOB_STATE_RUNNING, "running");
  v1::JobEvent round;
  round.mutable_round_completed()->set_round(1);
  record.Emit(round);
  ASSERT_EQ(observed.size(), 2u);
  EXPECT_EQ(observed[0].state_changed().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(observed[1].sequence(), 2);
  EXPECT_EQ(observed[1].job_id(), "job-000007");
  EXPECT_EQ(observed[1].round_completed().round(), 1);
  EXPECT_EQ(stored_when_observed, (std::vector<size_t>{1, 2}));
}

TEST_F(JobRecordTest, UpdatesAreStoredOnlyWhenPersisted) {
  record_->Update([](v1::Job* job) { job->mutable_progress()->set_rounds_completed(3); });
  EXPECT_EQ(record_->Snapshot().progress().rounds_completed(), 3);
  EXPECT_EQ((*store_->GetJob("job-000007"))->progress().rounds_completed(), 0);
  ASSERT_TRUE(record_->PersistOrFail().ok());
  EXPECT_EQ((*store_->GetJob("job-000007"))->progress().rounds_completed(), 3);
  v1::JobEvent event;
  event.mutable_evaluation()->set_round(3);
  record_->Emit(event);
  const std::vector<v1::JobEvent> events = Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].job_id(), "job-000007");
  EXPECT_TRUE(events[0].has_time());
}

// Each record signals its own job's changes: a watcher of one job does not wake for another's.
TEST_F(JobRecordTest, EveryStoredChangeWakesOnlyItsOwnJobsWatchers) {
  v1::Job other_job;
  other_job.set_job_id("job-000008");
  other_job.set_state(v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(store_->PutJob(other_job).ok());
  JobRecord other(other_job, 1, store_.get());
  const uint64_t mine = record_->events().count();
  const uint64_t theirs = other.events().count();
  other.SetState(v1::JOB_STATE_RUNNING, "running");
  other.SetReason("round 1/4");  // stored, no event: still a change watchers show
  v1::JobEvent round;
  round.mutable_round_completed()->set_round(1);
  other.Emit(round);
  EXPECT_EQ(other.events().count(), theirs + 3);
  EXPECT_EQ(record_->events().count(), mine);
  // A waiter on this job's signal times out instead of waking for the other job.
  EXPECT_EQ(record_->events().WaitAfter(mine, absl::ZeroDuration()), mine);
  record_->Emit(round);
  EXPECT_EQ(record_->events().WaitAfter(mine, absl::ZeroDuration()), mine + 1);
}

TEST_F(JobRecordTest, AwaitTerminalWaitsForATerminalStateOrTheDeadline) {
  EXPECT_FALSE(record_->AwaitTerminal(absl::InfinitePast()));  // QUEUED
  record_->SetState(v1::JOB_STATE_RUNNING, "running");
  EXPECT_FALSE(record_->AwaitTerminal(absl::Now()));
  std::thread runner([&] { record_->SetState(v1::JOB_STATE_CANCELLED, "cancelled by client"); });
  EXPECT_TRUE(record_->AwaitTerminal(absl::InfiniteFuture()));  // returns once the runner set it
  runner.join();
  EXPECT_EQ(record_->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(record_->AwaitTerminal(absl::InfinitePast()));  // already terminal: at once
}

}  // namespace
}  // namespace slimfit::server
