#include "server/state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/test_util.h"

namespace slimfit::server {
namespace {

TEST(StateStoreTest, EverythingSurvivesReopening) {
  const std::string path = testing_util::TempPath("state.db");
  {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    DatasetRecord dataset;
    dataset.info.set_dataset_id("ds-1");
    dataset.info.set_tokens(42);
    dataset.path = "/x";
    dataset.document_separator = std::string("\n\n");
    ASSERT_TRUE((*store)->PutDataset(dataset).ok());
    EXPECT_EQ(*(*store)->NextJobNumber(), 1);
    EXPECT_EQ(*(*store)->NextJobNumber(), 2);
    v1::Job job;
    job.set_job_id("job-000001");
    job.mutable_created_at()->set_seconds(10);
    ASSERT_TRUE((*store)->PutJob(job, "req-1").ok());
    job.set_state(v1::JOB_STATE_RUNNING);
    ASSERT_TRUE((*store)->PutJob(job).ok());  // keeps the request id
    v1::Job newer;
    newer.set_job_id("job-000002");
    newer.mutable_created_at()->set_seconds(20);
    ASSERT_TRUE((*store)->PutJob(newer).ok());
    for (int64_t s = 1; s <= 3; ++s) {
      v1::JobEvent event;
      event.set_job_id("job-000001");
      event.set_sequence(s);
      ASSERT_TRUE((*store)->AppendEvent(event).ok());
    }
    v1::JobEvent duplicate;
    duplicate.set_job_id("job-000001");
    duplicate.set_sequence(2);
    EXPECT_FALSE((*store)->AppendEvent(duplicate).ok());
    ASSERT_TRUE((*store)->PutCheckpoint({"job-000001", 5, 6, "/m", "/o", 100, "ab"}).ok());
    ASSERT_TRUE((*store)->PutCheckpoint({"job-000001", 0, 1, "/m0", "/o0", 100, "cd"}).ok());
    ASSERT_TRUE((*store)->PutWorker("w-1", 3).ok());
  }
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path);
  ASSERT_TRUE(store.ok());
  absl::StatusOr<std::optional<DatasetRecord>> dataset = (*store)->GetDataset("ds-1");
  ASSERT_TRUE(dataset.ok() && dataset->has_value());
  EXPECT_EQ((*dataset)->info.tokens(), 42);
  EXPECT_EQ(*(*dataset)->document_separator, "\n\n");
  EXPECT_FALSE((*(*store)->GetDataset("ds-2")).has_value());
  EXPECT_EQ(*(*store)->NextJobNumber(), 3);
  absl::StatusOr<std::optional<v1::Job>> by_request = (*store)->FindJobByRequestId("req-1");
  ASSERT_TRUE(by_request.ok() && by_request->has_value());
  EXPECT_EQ((*by_request)->state(), v1::JOB_STATE_RUNNING);
  absl::StatusOr<std::vector<v1::Job>> jobs = (*store)->ListJobs();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].job_id(), "job-000002");  // newest first
  absl::StatusOr<std::vector<v1::JobEvent>> events = (*store)->Events("job-000001", 1);
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].sequence(), 2);
  EXPECT_EQ(*(*store)->LastEventSequence("job-000001"), 3);
  EXPECT_EQ(*(*store)->LastEventSequence("job-000009"), 0);
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = (*store)->Checkpoints("job-000001");
  ASSERT_EQ(checkpoints->size(), 2u);
  EXPECT_EQ((*checkpoints)[1].round, 5);
  EXPECT_EQ((*checkpoints)[1].parameter_version, 6u);
  EXPECT_EQ((*(*store)->Workers())["w-1"], 3u);
}

TEST(StateStoreTest, UnopenablePathIsAnError) {
  EXPECT_EQ(StateStore::Open("/nonexistent/dir/state.db").status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace slimfit::server
