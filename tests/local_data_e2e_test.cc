// Datasets that stay on a worker (slimfit-worker --data): a real coordinator and real workers. A
// worker announces each dataset's name, counts and SHA-256 and `ListWorkers` shows them; a job over
// such datasets (JobSpec.local_datasets) trains exactly what the same text uploaded would, its
// shards and evaluations run only on the holders, and nothing the coordinator stores, logs or is
// told holds the data itself.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/files.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "performer/gradient_engine.h"
#include "performer/parameter_selection.h"
#include "performer/performer_model.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "tests/cluster.h"
#include "tests/e2e_support.h"

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

// A coordinator and three workers: one holding "notes" (8 MiB, the only worker that large), one
// holding nothing (no local shard may reach it), one holding "letters".
class LocalDataJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<Cluster>(
        absl::StrCat("local_data_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    ASSERT_TRUE(cluster_->StartCoordinator().ok()) << cluster_->Logs();
    notes_text_ = absl::StrCat(Corpus(16000), "\n\n", kPrivate, "\n\n", Corpus(2000));
    letters_text_ = Corpus(30000).substr(16000);
    WorkerOptions holds_notes, holds_letters;
    holds_notes.extra_flags = {
        absl::StrCat("--data=notes=", WriteTempFile("local_job_notes.txt", notes_text_)),
        "--data_separator=\\n\\n"};
    holds_letters.extra_flags = {
        absl::StrCat("--data=letters=", WriteTempFile("local_job_letters.txt", letters_text_)),
        "--data_separator=\\n\\n"};
    ASSERT_TRUE(cluster_->StartWorker("8MiB", holds_notes).ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->StartWorker("4MiB").ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->StartWorker("4MiB", holds_letters).ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->WaitForLiveWorkers(3, absl::Seconds(30)).ok()) << cluster_->Logs();
  }

  void TearDown() override {
    // The coordinator kept layouts, checkpoints and events: never the text.
    EXPECT_THAT(FilesHolding(cluster_->coordinator_state_dir(), kPrivate), ::testing::IsEmpty());
    EXPECT_EQ(cluster_->Logs().find(kPrivate), std::string::npos);
  }

  // A job over "notes" alone, by name.
  static v1::JobSpec NotesSpec() {
    v1::JobSpec spec = Spec("unused", 32, 64, 128, 6, 4);
    spec.clear_dataset_ids();
    spec.add_local_datasets("notes");
    return spec;
  }

  // Plain SGD, as local steps at H = 1 must reproduce it.
  static v1::JobSpec SgdSpec() {
    v1::JobSpec sgd = NotesSpec();
    sgd.set_rounds(3);
    sgd.set_verify_fraction(0);
    sgd.mutable_optimizer()->Clear();
    sgd.mutable_optimizer()->mutable_sgd()->set_momentum(0);
    sgd.mutable_optimizer()->set_learning_rate(0.1);
    sgd.mutable_optimizer()->set_warmup_steps(0);
    return sgd;
  }

  std::unique_ptr<Cluster> cluster_;
  std::string notes_text_;
  std::string letters_text_;
};

TEST_F(LocalDataJobTest, AJobOverOneWorkersDataTrainsWhatTheTextUploadedWouldOnItsHolder) {
  const v1::JobSpec spec = NotesSpec();
  const v1::Job done = RunToSuccess(*cluster_, spec);
  ASSERT_FALSE(done.job_id().empty());
  EXPECT_EQ(done.spec().local_datasets(0), base::Sha256Hex(notes_text_));  // stored by digest
  EXPECT_GT(done.held_out_tokens(), 0);
  EXPECT_LE(DistanceFromSingleProcess(*cluster_, done.job_id(), spec, notes_text_, std::string("\n\n")),
            1e-5);
  EXPECT_EQ(CountReassigned(*cluster_, done.job_id()), 0) << cluster_->Logs();  // never sent to a non-holder
  int evaluations = 0;
  for (const v1::JobEvent& event : AllEvents(*cluster_, done.job_id())) {
    if (event.has_evaluation() && event.evaluation().tokens() > 0) ++evaluations;
    if (event.has_round_completed()) {
      EXPECT_EQ(event.round_completed().workers(), 1);  // the one holder
    }
  }
  EXPECT_GE(evaluations, 2);  // before the first round and after the last, on the holder
}

TEST_F(LocalDataJobTest, PersonalisationTrainsTheSubsetExactlyAndSendsOnlyIt) {
  // The same job training only the second layer and the output map: exactly the single process's
  // result with the same subset; the other parameters bit for bit as they started; only the
  // trainable half of the model travels back, and after the first fetch, out.
  const v1::JobSpec spec = NotesSpec();
  const v1::Job full = RunToSuccess(*cluster_, spec);
  v1::JobSpec personal = spec;
  personal.set_trainable("layers.1.*,output_logit_map.*");
  const v1::Job done = RunToSuccess(*cluster_, personal);
  ASSERT_FALSE(full.job_id().empty() || done.job_id().empty());
  const std::vector<at::Tensor> local = TrainLocally(personal, notes_text_, std::string("\n\n"));
  const std::vector<at::Tensor> exported = ExportedParameters(*cluster_, done.job_id(), personal);
  ASSERT_EQ(exported.size(), local.size());
  EXPECT_LE(performer::RelativeDiscrepancy(exported, local), 1e-5);
  absl::StatusOr<performer::ModelConfig> config =
      planner::ModelConfigFromProto(personal.model().config(), "model");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::vector<int>> trainable =
      performer::SelectParameters(performer::ParameterNames(*config), personal.trainable());
  ASSERT_TRUE(trainable.ok()) << trainable.status();
  const std::vector<at::Tensor> full_run = ExportedParameters(*cluster_, full.job_id(), spec);
  for (size_t i = 0; i < exported.size(); ++i) {
    if (std::count(trainable->begin(), trainable->end(), static_cast<int>(i)) > 0) continue;
    EXPECT_TRUE(at::equal(exported[i], local[i])) << i;      // the initial values, bit for bit
    EXPECT_FALSE(at::equal(exported[i], full_run[i])) << i;  // which a full job does train
  }
  EXPECT_LT(done.progress().bytes_from_workers(), 0.6 * full.progress().bytes_from_workers());
  EXPECT_LT(done.progress().bytes_to_workers(), 0.8 * full.progress().bytes_to_workers());
}

TEST_F(LocalDataJobTest, TwoWorkersDatasetsTrainTogetherEachOnItsHolder) {
  v1::JobSpec both = NotesSpec();
  both.add_local_datasets(base::Sha256Hex(letters_text_));  // one by name, one by digest
  both.set_rounds(3);
  const v1::Job done = RunToSuccess(*cluster_, both);
  ASSERT_FALSE(done.job_id().empty());
  EXPECT_EQ(CountReassigned(*cluster_, done.job_id()), 0) << cluster_->Logs();
  int most_workers = 0;
  for (const v1::JobEvent& event : AllEvents(*cluster_, done.job_id())) {
    if (event.has_round_completed()) most_workers = std::max(most_workers, event.round_completed().workers());
  }
  EXPECT_EQ(most_workers, 2);
}

TEST_F(LocalDataJobTest, LocalStepsRunOverWorkersOwnDataAloneAndMixedWithUploads) {
  // One inner step of plain SGD applied as it is, is the synchronous step over the same batch.
  const v1::JobSpec sgd = SgdSpec();
  v1::JobSpec local_steps = sgd;
  local_steps.set_local_steps(1);
  *local_steps.mutable_outer_optimizer() = sgd.optimizer();
  local_steps.mutable_outer_optimizer()->set_learning_rate(1.0);
  const v1::Job alone = RunToSuccess(*cluster_, local_steps);
  ASSERT_FALSE(alone.job_id().empty());
  EXPECT_LE(DistanceFromSingleProcess(*cluster_, alone.job_id(), sgd, notes_text_, std::string("\n\n")),
            1e-5);

  // Two inner steps over uploads and the worker's own data together, on the holder alone (the only
  // worker with 8 MiB): its requests mix both (ComputeGradientRequest.local_data positions).
  absl::StatusOr<std::string> upload = cluster_->UploadText(Corpus(12000), std::string("\n\n"));
  ASSERT_TRUE(upload.ok()) << upload.status();
  v1::JobSpec mixed = local_steps;
  mixed.add_dataset_ids(*upload);
  mixed.set_local_steps(2);
  mixed.set_rounds(2);
  mixed.mutable_constraints()->set_min_memory_bytes(8 << 20);
  const v1::Job done = RunToSuccess(*cluster_, mixed);
  ASSERT_FALSE(done.job_id().empty());
  EXPECT_EQ(CountReassigned(*cluster_, done.job_id()), 0) << cluster_->Logs();
}

TEST_F(LocalDataJobTest, WhatNoWorkerHoldsIsRefusedAtSubmissionNamingTheEntry) {
  v1::JobSpec unknown = NotesSpec();
  unknown.set_local_datasets(0, "nope");
  absl::StatusOr<v1::Job> refused = cluster_->Submit(unknown);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("spec.local_datasets[0]: no registered worker holds a dataset named 'nope'"));
}

}  // namespace
}  // namespace slimfit::testing_util
