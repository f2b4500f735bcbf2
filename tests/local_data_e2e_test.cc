// Datasets that stay on a worker (slimfit-worker --data): a real coordinator and real workers. A
// worker announces each dataset's name, counts and SHA-256 and `ListWorkers` shows them; a job over
// such datasets (JobSpec.local_datasets) trains exactly what the same text uploaded would, its
// shards and evaluations run only on the holders, and nothing the coordinator stores, logs or is
// told holds the data itself.
#include <algorithm>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/files.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "performer/gradient_engine.h"
#include "performer/parameter_selection.h"
#include "performer/performer_model.h"
#include "planner/plan_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/rpc_util.h"
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

TEST(LocalDataE2E, JobsOverWorkerLocalDataTrainExactlyOnTheHoldersAndTheTextStaysThere) {
  Cluster cluster("local_data_job");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  // Two holders of different texts, and a worker that holds nothing: no local shard may reach it.
  const std::string notes_text = absl::StrCat(Corpus(16000), "\n\n", kPrivate, "\n\n", Corpus(2000));
  const std::string letters_text = Corpus(30000).substr(16000);
  const std::string notes = WriteTempFile("local_job_notes.txt", notes_text);
  const std::string letters = WriteTempFile("local_job_letters.txt", letters_text);
  WorkerOptions holds_notes, holds_letters;
  holds_notes.extra_flags = {absl::StrCat("--data=notes=", notes), "--data_separator=\\n\\n"};
  holds_letters.extra_flags = {absl::StrCat("--data=letters=", letters), "--data_separator=\\n\\n"};
  ASSERT_TRUE(cluster.StartWorker("8MiB", holds_notes).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker("4MiB", holds_letters).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(3, absl::Seconds(30)).ok()) << cluster.Logs();

  // One worker's dataset, by name: the same batches, the same steps as the text uploaded.
  v1::JobSpec spec = Spec("unused", 32, 64, 128, 6, 4);
  spec.clear_dataset_ids();
  spec.add_local_datasets("notes");
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  EXPECT_EQ(job->spec().local_datasets(0), base::Sha256Hex(notes_text));  // stored by digest
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(180));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_GT(done->held_out_tokens(), 0);
  EXPECT_LE(DistanceFromSingleProcess(cluster, job->job_id(), spec, notes_text, std::string("\n\n")), 1e-5);
  EXPECT_EQ(CountReassigned(cluster, job->job_id()), 0) << cluster.Logs();  // never sent to a non-holder
  int evaluations = 0;
  for (const v1::JobEvent& event : AllEvents(cluster, job->job_id())) {
    if (event.has_evaluation() && event.evaluation().tokens() > 0) ++evaluations;
    if (event.has_round_completed()) {
      EXPECT_EQ(event.round_completed().workers(), 1);  // the one holder
    }
  }
  EXPECT_GE(evaluations, 2);  // before the first round and after the last, on the holder

  // Personalisation: the same job training only the second layer and the output map. Exactly the
  // single process's result with the same subset; the other parameters bit for bit as they started;
  // only the trainable half of the model travels back, and after the first fetch, out.
  v1::JobSpec personal = spec;
  personal.set_trainable("layers.1.*,output_logit_map.*");
  absl::StatusOr<v1::Job> personal_job = cluster.Submit(personal);
  ASSERT_TRUE(personal_job.ok()) << personal_job.status() << cluster.Logs();
  absl::StatusOr<v1::Job> personal_done = cluster.WaitForJob(personal_job->job_id(), absl::Seconds(180));
  ASSERT_TRUE(personal_done.ok()) << personal_done.status() << cluster.Logs();
  ASSERT_EQ(personal_done->state(), v1::JOB_STATE_SUCCEEDED) << personal_done->state_reason() << cluster.Logs();
  const std::vector<at::Tensor> local = TrainLocally(personal, notes_text, std::string("\n\n"));
  const std::vector<at::Tensor> exported = ExportedParameters(cluster, personal_job->job_id(), personal);
  ASSERT_EQ(exported.size(), local.size());
  EXPECT_LE(performer::RelativeDiscrepancy(exported, local), 1e-5);
  absl::StatusOr<performer::ModelConfig> config = planner::ModelConfigFromProto(personal.model().config(), "model");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::vector<int>> trainable =
      performer::SelectParameters(performer::ParameterNames(*config), personal.trainable());
  ASSERT_TRUE(trainable.ok()) << trainable.status();
  const std::vector<at::Tensor> full_run = ExportedParameters(cluster, job->job_id(), spec);
  for (size_t i = 0; i < exported.size(); ++i) {
    if (std::count(trainable->begin(), trainable->end(), static_cast<int>(i)) > 0) continue;
    EXPECT_TRUE(at::equal(exported[i], local[i])) << i;       // the initial values, bit for bit
    EXPECT_FALSE(at::equal(exported[i], full_run[i])) << i;  // which a full job does train
  }
  EXPECT_LT(personal_done->progress().bytes_from_workers(), 0.6 * done->progress().bytes_from_workers());
  EXPECT_LT(personal_done->progress().bytes_to_workers(), 0.8 * done->progress().bytes_to_workers());

  // Both workers' datasets (one by digest) beside each other: each shard on its holder.
  v1::JobSpec both = spec;
  both.clear_local_datasets();
  both.add_local_datasets("notes");
  both.add_local_datasets(base::Sha256Hex(letters_text));
  both.set_rounds(3);
  job = cluster.Submit(both);
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  done = cluster.WaitForJob(job->job_id(), absl::Seconds(180));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_EQ(CountReassigned(cluster, job->job_id()), 0) << cluster.Logs();
  int most_workers = 0;
  for (const v1::JobEvent& event : AllEvents(cluster, job->job_id())) {
    if (event.has_round_completed()) most_workers = std::max(most_workers, event.round_completed().workers());
  }
  EXPECT_EQ(most_workers, 2);

  // Local steps over a worker's own data: one inner step of plain SGD applied as it is, is the
  // synchronous step over the same batch.
  v1::JobSpec sgd = spec;
  sgd.set_rounds(3);
  sgd.set_verify_fraction(0);
  sgd.mutable_optimizer()->Clear();
  sgd.mutable_optimizer()->mutable_sgd()->set_momentum(0);
  sgd.mutable_optimizer()->set_learning_rate(0.1);
  sgd.mutable_optimizer()->set_warmup_steps(0);
  v1::JobSpec local_steps = sgd;
  local_steps.set_local_steps(1);
  *local_steps.mutable_outer_optimizer() = sgd.optimizer();
  local_steps.mutable_outer_optimizer()->set_learning_rate(1.0);
  job = cluster.Submit(local_steps);
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  done = cluster.WaitForJob(job->job_id(), absl::Seconds(180));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_LE(DistanceFromSingleProcess(cluster, job->job_id(), sgd, notes_text, std::string("\n\n")), 1e-5);

  // Two inner steps over uploads and a worker's own data together, on the holder alone (the only
  // worker with 8 MiB): its requests mix both (ComputeGradientRequest.local_data positions).
  absl::StatusOr<std::string> upload = cluster.UploadText(Corpus(12000), std::string("\n\n"));
  ASSERT_TRUE(upload.ok()) << upload.status();
  v1::JobSpec mixed = local_steps;
  mixed.add_dataset_ids(*upload);
  mixed.set_local_steps(2);
  mixed.set_rounds(2);
  mixed.mutable_constraints()->set_min_memory_bytes(8 << 20);
  job = cluster.Submit(mixed);
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  done = cluster.WaitForJob(job->job_id(), absl::Seconds(180));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_EQ(CountReassigned(cluster, job->job_id()), 0) << cluster.Logs();

  // What no worker holds is refused at submission, naming the entry.
  v1::JobSpec unknown = spec;
  unknown.set_local_datasets(0, "nope");
  absl::StatusOr<v1::Job> refused = cluster.Submit(unknown);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("spec.local_datasets[0]: no registered worker holds a dataset named 'nope'"));

  // The coordinator kept layouts, checkpoints and events: never the text.
  EXPECT_THAT(FilesHolding(cluster.coordinator_state_dir(), kPrivate), ::testing::IsEmpty());
  EXPECT_EQ(cluster.Logs().find(kPrivate), std::string::npos);
}

}  // namespace
}  // namespace slimfit::testing_util
