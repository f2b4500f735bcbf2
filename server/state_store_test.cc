#include "server/state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "absl/strings/str_cat.h"
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
    ASSERT_TRUE((*store)->PutWorker("w-1", WorkerRecord{3, "ab12", false, "", absl::InfinitePast()}).ok());
    WorkerRecord revoked{7, "cd34", true, "stolen laptop", absl::FromUnixSeconds(1700000000)};
    ASSERT_TRUE((*store)->PutWorker("w-2", revoked).ok());
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
  absl::StatusOr<std::map<std::string, WorkerRecord>> workers = (*store)->Workers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ((*workers)["w-1"].incarnation, 3u);
  EXPECT_EQ((*workers)["w-1"].credential_sha256, "ab12");
  EXPECT_FALSE((*workers)["w-1"].revoked);
  EXPECT_TRUE((*workers)["w-2"].revoked);
  EXPECT_EQ((*workers)["w-2"].revoked_reason, "stolen laptop");
  EXPECT_EQ((*workers)["w-2"].revoked_at, absl::FromUnixSeconds(1700000000));
}

TEST(StateStoreTest, AWorkersTableFromBeforeCredentialsGetsTheNewColumns) {
  const std::string path = testing_util::TempPath("old_workers.db");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE workers (id TEXT PRIMARY KEY, incarnation INTEGER NOT NULL);"
                           "INSERT INTO workers VALUES ('w-old', 4);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::map<std::string, WorkerRecord>> workers = (*store)->Workers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ((*workers)["w-old"].incarnation, 4u);
  EXPECT_EQ((*workers)["w-old"].credential_sha256, "");
  EXPECT_FALSE((*workers)["w-old"].revoked);
}

TEST(StateStoreTest, ACheckpointsTableFromBeforeOptimizerDigestsReadsWithNone) {
  const std::string path = testing_util::TempPath("old_checkpoints.db");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE checkpoints (job_id TEXT NOT NULL, round INTEGER NOT NULL, version "
                           "INTEGER NOT NULL, model_path TEXT NOT NULL, optimizer_path TEXT NOT NULL, bytes "
                           "INTEGER NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY (job_id, round));"
                           "INSERT INTO checkpoints VALUES ('job-1', 2, 3, '/m2', '/o2', 100, 'ab');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  for (int open = 0; open < 2; ++open) {  // the column is added once
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = (*store)->Checkpoints("job-1");
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    ASSERT_EQ(checkpoints->size(), 1u);
    EXPECT_EQ((*checkpoints)[0].sha256, "ab");
    EXPECT_EQ((*checkpoints)[0].optimizer_sha256, "") << "not verifiable";
  }
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path);
  ASSERT_TRUE((*store)->PutCheckpoint({"job-1", 3, 4, "/m3", "/o3", 100, "cd", "ef"}).ok());
  EXPECT_EQ((*store)->Checkpoints("job-1")->back().optimizer_sha256, "ef");
}

TEST(StateStoreTest, CheckpointsAfterARoundAreForgotten) {
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(testing_util::TempPath("rollback.db"));
  ASSERT_TRUE(store.ok()) << store.status();
  for (int64_t round = 0; round <= 4; ++round) {
    ASSERT_TRUE((*store)
                    ->PutCheckpoint({"job-1", round, static_cast<uint64_t>(round + 1),
                                     absl::StrCat("/m", round), "/o", 100, "ab"})
                    .ok());
  }
  ASSERT_TRUE((*store)->PutCheckpoint({"job-2", 3, 4, "/other", "/o", 100, "ab"}).ok());
  absl::StatusOr<std::vector<CheckpointRecord>> deleted = (*store)->DeleteCheckpointsAfter("job-1", 2);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  ASSERT_EQ(deleted->size(), 2u);
  EXPECT_EQ((*deleted)[0].model_path, "/m3");
  EXPECT_EQ((*deleted)[1].model_path, "/m4");
  ASSERT_EQ((*store)->Checkpoints("job-1")->size(), 3u);
  EXPECT_EQ((*store)->Checkpoints("job-1")->back().round, 2);
  EXPECT_EQ((*store)->Checkpoints("job-2")->size(), 1u);  // another job's are kept
}

TEST(StateStoreTest, QueuedWorkersAreWrittenTogetherInQueueOrder) {
  const std::string path = testing_util::TempPath("queued_workers.db");
  {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto first = (*store)->QueueWorker("w-1", WorkerRecord{1, "aa", false, "", absl::InfinitePast()});
    auto second = (*store)->QueueWorker("w-2", WorkerRecord{1, "bb", false, "", absl::InfinitePast()});
    auto again = (*store)->QueueWorker("w-1", WorkerRecord{2, "aa", false, "", absl::InfinitePast()});
    // Awaiting the last writes all three; the others are already durable when awaited.
    ASSERT_TRUE((*store)->AwaitWorker(again).ok());
    EXPECT_TRUE((*store)->AwaitWorker(first).ok());
    EXPECT_TRUE((*store)->AwaitWorker(second).ok());
  }
  absl::StatusOr<std::unique_ptr<StateStore>> reopened = StateStore::Open(path);
  ASSERT_TRUE(reopened.ok());
  absl::StatusOr<std::map<std::string, WorkerRecord>> workers = (*reopened)->Workers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 2u);
  EXPECT_EQ((*workers)["w-1"].incarnation, 2u);  // the later record of w-1
  EXPECT_EQ((*workers)["w-2"].credential_sha256, "bb");
}

TEST(StateStoreTest, UnopenablePathIsAnError) {
  EXPECT_EQ(StateStore::Open("/nonexistent/dir/state.db").status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace slimfit::server
