// Datasets that stay on a worker (slimfit-worker --data): a real coordinator and a real worker. The
// worker announces each dataset's name, counts and SHA-256, `ListWorkers` shows them, and nothing
// the coordinator stores, logs or is told holds the data itself.
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/files.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/rpc_util.h"
#include "tests/cluster.h"

namespace slimfit::testing_util {
namespace {

using ::testing::HasSubstr;

// A document no one else writes: found anywhere, it came from the worker's file.
constexpr char kPrivate[] = "private-7f3a9c-only-on-the-worker";

// Every file under `dir` that holds `needle`.
std::vector<std::string> FilesHolding(const std::string& dir, const std::string& needle) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    absl::StatusOr<std::string> bytes = base::ReadFileToString(entry.path().string());
    if (bytes.ok() && bytes->find(needle) != std::string::npos) found.push_back(entry.path().string());
  }
  return found;
}

TEST(LocalDataE2E, AWorkerAnnouncesItsDatasetsAndTheirBytesStayOnIt) {
  Cluster cluster("local_data");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  std::string text;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&text, "note ", i, ": ", kPrivate, "\n\n");
  const std::string notes = WriteTempFile("local_data_notes.txt", text);
  const std::string letter = WriteTempFile("local_data_letter.txt", "one letter, one document");
  WorkerOptions options;
  options.extra_flags = {absl::StrCat("--data=notes=", notes, ",letter=", letter), "--data_separator=\\n\\n"};
  ASSERT_TRUE(cluster.StartWorker("4MiB", options).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(1, absl::Seconds(30)).ok()) << cluster.Logs();

  auto context = rpc::MakeClientContext(kClientToken, std::chrono::seconds(5));
  v1::ListWorkersResponse listed;
  ASSERT_TRUE(cluster.Stub()->ListWorkers(context.get(), v1::ListWorkersRequest(), &listed).ok());
  ASSERT_EQ(listed.workers_size(), 1);
  const v1::WorkerInfo& worker = listed.workers(0);
  ASSERT_EQ(worker.local_datasets_size(), 2) << worker.DebugString();
  const v1::LocalDataset& announced = worker.local_datasets(0);
  EXPECT_EQ(announced.name(), "notes");
  EXPECT_EQ(announced.documents(), 40);
  EXPECT_EQ(announced.tokens(), static_cast<int64_t>(text.size()) - 40 * 2);  // separators dropped
  EXPECT_EQ(announced.sha256(), base::Sha256Hex(text));
  EXPECT_EQ(announced.content_type(), "text/plain");
  EXPECT_EQ(worker.local_datasets(1).name(), "letter");
  EXPECT_EQ(worker.local_datasets(1).documents(), 1);

  // What the coordinator was told and what it keeps: descriptions, never the text.
  EXPECT_EQ(listed.SerializeAsString().find(kPrivate), std::string::npos);
  EXPECT_THAT(FilesHolding(cluster.coordinator_state_dir(), kPrivate), ::testing::IsEmpty());
  EXPECT_EQ(cluster.Logs().find(kPrivate), std::string::npos);
  EXPECT_THAT(cluster.Logs(), HasSubstr("local dataset notes"));  // the worker's own log says what it read
}

TEST(LocalDataE2E, AnUnreadableDatasetStopsTheWorkerWithOneLine) {
  Cluster cluster("local_data_missing");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  WorkerOptions options;
  options.extra_flags = {"--data=gone=/nonexistent/slimfit/notes.txt"};
  options.wait_until_serving = false;
  absl::StatusOr<int> index = cluster.StartWorker("4MiB", options);
  ASSERT_TRUE(index.ok()) << cluster.Logs();
  absl::StatusOr<int> exit_code = cluster.worker(*index).Wait(absl::Seconds(30));
  ASSERT_TRUE(exit_code.ok()) << cluster.Logs();
  EXPECT_NE(*exit_code, 0);
  EXPECT_THAT(cluster.Logs(), HasSubstr("local dataset gone (/nonexistent/slimfit/notes.txt)"));
}

}  // namespace
}  // namespace slimfit::testing_util
