// JobRunner resuming after a coordinator restart, in-process on a fresh state directory: the
// checkpoints are written by the trainer's own checkpoint writer and recorded as the runner records
// them; then bytes of some are flipped on disk, as a failing disk or a careless hand would. The
// runner is created (as Coordinator::ResumeJobs does) and never started: no worker, no thread.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "base/verified_file.h"
#include "performer/performer_model.h"
#include "performer/trainer.h"
#include "server/job_runner.h"
#include "server/test_job_spec.h"
#include "wire/engine_settings.h"

namespace slimfit::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kJobId[] = "job-000001";

// Overwrites two bytes near the end of `path` (tensor data, past the safetensors header) in place.
void FlipBytes(const std::string& path) {
  const auto size = static_cast<std::streamoff>(fs::file_size(path));
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file.good()) << path;
  for (std::streamoff at : {size - 9, size - 5}) {
    file.seekg(at);
    const char byte = static_cast<char>(file.get());
    file.seekp(at);
    file.put(static_cast<char>(byte ^ 0x5A));
  }
  ASSERT_TRUE(file.good()) << path;
}

class JobRunnerResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing_util::TempPath(
        absl::StrCat("job_runner_resume_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    job_dir_ = absl::StrCat(root_, "/jobs/", kJobId);
    fs::create_directories(job_dir_);
    store_ = *StateStore::Open(absl::StrCat(root_, "/state.db"));
    registry_ = *WorkerRegistry::Create(store_.get(), RegistryOptions{});
    config_ = TestModelConfig();
    v1::JobSpec& spec = *job_.mutable_spec();
    *spec.mutable_model()->mutable_config() = TestModelConfigProto();
    spec.set_sequence_length(16);
    spec.set_tokens_per_round(32);
    spec.set_rounds(5);
    spec.mutable_optimizer()->mutable_adamw();
    spec.mutable_optimizer()->set_learning_rate(1e-3);
    spec.set_seed(7);
    job_.set_job_id(kJobId);
    job_.set_state(v1::JOB_STATE_RUNNING);
    // As stored before the coordinator stopped: three rounds done, version 4 published.
    job_.mutable_progress()->set_rounds(5);
    job_.mutable_progress()->set_rounds_completed(3);
    job_.mutable_progress()->set_parameters_round(3);
    job_.mutable_progress()->set_parameter_version(4);
    ASSERT_TRUE(store_->PutJob(job_).ok());
  }

  // The parameters after `round`: the initial ones plus `round`, so that each round's differ.
  std::vector<at::Tensor> Parameters(int64_t round) const {
    std::vector<at::Tensor> parameters =
        performer::PerformerModel::Create(config_, performer::DType::kFloat32, at::kCPU, 7)->parameters();
    for (at::Tensor& tensor : parameters) tensor = tensor + static_cast<double>(round);
    return parameters;
  }

  // Writes and records the checkpoint of `round` as JobRunner does (Trainer::WriteCheckpoint, then
  // both files' digests); `optimizer_digest` false records it as a checkpoint from before the
  // optimizer file's digest was kept.
  CheckpointRecord WriteCheckpoint(int64_t round, bool optimizer_digest = true) {
    CheckpointRecord record;
    record.job_id = kJobId;
    record.round = round;
    record.parameter_version = static_cast<uint64_t>(round + 1);
    const std::string prefix = absl::StrFormat("%s/round-%06d", job_dir_, round);
    record.model_path = prefix + ".safetensors";
    record.optimizer_path = prefix + ".optimizer.safetensors";
    absl::StatusOr<std::unique_ptr<performer::Trainer>> trainer =
        performer::Trainer::Create(config_, performer::DType::kFloat32, Parameters(round),
                                   wire::OptimizerSettingsOf(job_.spec().optimizer()));
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    const std::map<std::string, std::string> metadata = {{"tokens_trained", absl::StrCat(32 * round)}};
    EXPECT_TRUE(performer::Trainer::WriteCheckpoint((*trainer)->TakeCheckpoint(metadata), record.model_path,
                                                    record.optimizer_path)
                    .ok());
    record.sha256 = *base::Sha256OfFile(record.model_path);
    record.bytes = static_cast<int64_t>(fs::file_size(record.model_path));
    if (optimizer_digest) record.optimizer_sha256 = *base::Sha256OfFile(record.optimizer_path);
    EXPECT_TRUE(store_->PutCheckpoint(record).ok());
    return record;
  }

  absl::StatusOr<std::unique_ptr<JobRunner>> Resume(std::vector<at::Tensor> initial = {},
                                                    bool initial_at_hand = false) {
    rpc::TokenStream stream;
    for (int i = 0; i < 1024; ++i) stream.tokens.push_back(i % 251);
    stream.doc_starts = {0};
    absl::StatusOr<JobData> data = JobData::Create(std::move(stream), 256, 16, 32, 0, 7);
    if (!data.ok()) return data.status();
    RunnerDeps deps;
    deps.store = store_.get();
    deps.registry = registry_.get();
    deps.leases = &leases_;
    deps.signal = &signal_;
    deps.job_dir = job_dir_;
    if (initial_at_hand) deps.initial_parameters = [this] { return Parameters(0); };
    absl::StatusOr<std::optional<v1::Job>> stored = store_->GetJob(kJobId);
    if (!stored.ok()) return stored.status();
    return JobRunner::Create(stored->value(), *std::move(data), config_, std::move(initial), std::move(deps));
  }

  // The runner's published parameters equal those after `round`.
  void ExpectParametersOf(const JobRunner& runner, int64_t round) {
    absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> published =
        runner.Parameters(runner.Snapshot().progress().parameter_version());
    ASSERT_TRUE(published.ok()) << published.status();
    const std::vector<at::Tensor> expected = Parameters(round);
    ASSERT_EQ((*published)->tensors.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(at::equal((*published)->tensors[i], expected[i])) << "tensor " << i << ", round " << round;
    }
  }

  // The last event the runner stored.
  v1::JobEvent LastEvent() {
    absl::StatusOr<std::vector<v1::JobEvent>> events = store_->Events(kJobId, 0);
    EXPECT_TRUE(events.ok() && !events->empty());
    return events.ok() && !events->empty() ? events->back() : v1::JobEvent();
  }

  std::vector<int64_t> RecordedRounds() {
    std::vector<int64_t> rounds;
    absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_->Checkpoints(kJobId);
    EXPECT_TRUE(checkpoints.ok()) << checkpoints.status();
    if (!checkpoints.ok()) return rounds;
    for (const CheckpointRecord& checkpoint : *checkpoints) rounds.push_back(checkpoint.round);
    return rounds;
  }

  std::string root_;
  std::string job_dir_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  WorkerLeases leases_;
  EventSignal signal_;
  performer::ModelConfig config_;
  v1::Job job_;
};

TEST_F(JobRunnerResumeTest, ARestartGoesOnFromTheLatestCheckpointAndSaysSo) {
  for (int64_t round : {0, 2, 3}) WriteCheckpoint(round);
  absl::StatusOr<std::unique_ptr<JobRunner>> runner = Resume();
  ASSERT_TRUE(runner.ok()) << runner.status();
  const v1::JobProgress progress = (*runner)->Snapshot().progress();
  EXPECT_EQ(progress.parameters_round(), 3);
  EXPECT_EQ(progress.rounds_completed(), 3);
  EXPECT_EQ(progress.tokens_trained(), 96);
  EXPECT_EQ(progress.parameter_version(), 5u) << "never reused";
  ExpectParametersOf(**runner, 3);
  const v1::JobEvent event = LastEvent();
  ASSERT_TRUE(event.has_resumed()) << event.DebugString();
  EXPECT_EQ(event.resumed().round(), 3);
  EXPECT_EQ(event.resumed().reason(), v1::JobResumed::REASON_COORDINATOR_RESTART);
  EXPECT_EQ(event.resumed().rounds_completed(), 3);
  EXPECT_EQ(event.resumed().unverifiable_checkpoints_size(), 0);
  EXPECT_FALSE(event.resumed().initial_parameters());
}

TEST_F(JobRunnerResumeTest, AFlippedModelFileFallsBackToTheNewestCheckpointThatVerifies) {
  for (int64_t round : {0, 2}) WriteCheckpoint(round);
  const CheckpointRecord latest = WriteCheckpoint(3);
  FlipBytes(latest.model_path);
  absl::StatusOr<std::unique_ptr<JobRunner>> runner = Resume();
  ASSERT_TRUE(runner.ok()) << runner.status();
  const v1::JobProgress progress = (*runner)->Snapshot().progress();
  EXPECT_EQ(progress.parameters_round(), 2);
  EXPECT_EQ(progress.checkpoint_round(), 2);
  EXPECT_EQ(progress.rounds_completed(), 3) << "what clients see does not go back";
  EXPECT_EQ(progress.tokens_trained(), 64);
  ExpectParametersOf(**runner, 2);
  const v1::JobEvent event = LastEvent();
  ASSERT_TRUE(event.has_resumed()) << event.DebugString();
  EXPECT_EQ(event.resumed().round(), 2);
  EXPECT_EQ(event.resumed().rounds_completed(), 3);
  ASSERT_EQ(event.resumed().unverifiable_checkpoints_size(), 1);
  EXPECT_THAT(event.resumed().unverifiable_checkpoints(0), HasSubstr("round 3: " + latest.model_path));
  EXPECT_THAT(event.resumed().unverifiable_checkpoints(0), HasSubstr("SHA-256"));
  // The void checkpoint is forgotten with its files: round 3 runs again and writes it anew.
  EXPECT_EQ(RecordedRounds(), (std::vector<int64_t>{0, 2}));
  EXPECT_FALSE(fs::exists(latest.model_path));
  EXPECT_FALSE(fs::exists(latest.optimizer_path));
}

TEST_F(JobRunnerResumeTest, AFlippedOptimizerFileIsPassedOverToo) {
  WriteCheckpoint(0);
  const CheckpointRecord latest = WriteCheckpoint(3);
  FlipBytes(latest.optimizer_path);
  absl::StatusOr<std::unique_ptr<JobRunner>> runner = Resume();
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->Snapshot().progress().parameters_round(), 0);
  const v1::JobEvent event = LastEvent();
  ASSERT_EQ(event.resumed().unverifiable_checkpoints_size(), 1);
  EXPECT_THAT(event.resumed().unverifiable_checkpoints(0), HasSubstr(latest.optimizer_path));
}

TEST_F(JobRunnerResumeTest, ACheckpointFromBeforeOptimizerDigestsResumesOnItsModelDigest) {
  WriteCheckpoint(0, /*optimizer_digest=*/false);
  const CheckpointRecord latest = WriteCheckpoint(3, /*optimizer_digest=*/false);
  absl::StatusOr<std::unique_ptr<JobRunner>> runner = Resume();
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->Snapshot().progress().parameters_round(), 3);
  ExpectParametersOf(**runner, 3);
}

TEST_F(JobRunnerResumeTest, ATruncatedOrMissingFileIsPassedOver) {
  WriteCheckpoint(0);
  const CheckpointRecord second = WriteCheckpoint(2);
  const CheckpointRecord third = WriteCheckpoint(3);
  fs::resize_file(third.model_path, fs::file_size(third.model_path) - 1);
  fs::remove(second.model_path);
  absl::StatusOr<std::unique_ptr<JobRunner>> runner = Resume();
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->Snapshot().progress().parameters_round(), 0);
  const v1::JobEvent event = LastEvent();
  ASSERT_EQ(event.resumed().unverifiable_checkpoints_size(), 2);
  EXPECT_THAT(event.resumed().unverifiable_checkpoints(0), HasSubstr("round 3"));
  EXPECT_THAT(event.resumed().unverifiable_checkpoints(1), HasSubstr("round 2"));
  EXPECT_THAT(event.resumed().unverifiable_checkpoints(1), HasSubstr("missing"));
  EXPECT_EQ(RecordedRounds(), (std::vector<int64_t>{0}));
}

TEST_F(JobRunnerResumeTest, NoCheckpointVerifiesStartsOverFromTheInitialParameters) {
  for (int64_t round : {0, 3}) FlipBytes(WriteCheckpoint(round).model_path);
  absl::StatusOr<std::unique_ptr<JobRunner>> runner = Resume({}, /*initial_at_hand=*/true);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const v1::JobProgress progress = (*runner)->Snapshot().progress();
  EXPECT_EQ(progress.parameters_round(), 0);
  EXPECT_EQ(progress.rounds_completed(), 3);
  EXPECT_EQ(progress.tokens_trained(), 0);
  EXPECT_FALSE(progress.has_checkpoint_round());
  EXPECT_EQ(progress.parameter_version(), 5u) << "never reused";
  ExpectParametersOf(**runner, 0);
  const v1::JobEvent event = LastEvent();
  ASSERT_TRUE(event.has_resumed()) << event.DebugString();
  EXPECT_TRUE(event.resumed().initial_parameters());
  EXPECT_EQ(event.resumed().round(), 0);
  EXPECT_EQ(event.resumed().unverifiable_checkpoints_size(), 2);
  EXPECT_TRUE(RecordedRounds().empty()) << "the run writes round 0 first, as a fresh job does";
}

TEST_F(JobRunnerResumeTest, NoCheckpointVerifiesAndNoInitialParametersIsDataLoss) {
  for (int64_t round : {0, 3}) FlipBytes(WriteCheckpoint(round).model_path);
  absl::StatusOr<std::unique_ptr<JobRunner>> runner = Resume();
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kDataLoss) << runner.status();
  EXPECT_THAT(std::string(runner.status().message()), HasSubstr("no checkpoint of job-000001 matches"));
  EXPECT_THAT(std::string(runner.status().message()), HasSubstr("round 0: "));
  EXPECT_THAT(std::string(runner.status().message()), HasSubstr("initial parameters are not at hand"));
  EXPECT_EQ(RecordedRounds(), (std::vector<int64_t>{0, 3})) << "a job that cannot go on keeps what it had";
}

// What ExportModel streams (CoordinatorService::ExportModel): a checkpoint file checked against its
// record as it goes out. A flipped byte is DATA_LOSS naming the file, after the last chunk, so
// that the stream ends with it instead of a trailer.
TEST_F(JobRunnerResumeTest, ExportingAFlippedCheckpointEndsInDataLossNamingTheFile) {
  const CheckpointRecord record = WriteCheckpoint(3);
  int64_t sent = 0;
  auto send = [&](absl::string_view chunk) {
    sent += static_cast<int64_t>(chunk.size());
    return true;
  };
  ASSERT_TRUE(base::StreamVerifiedFile(record.model_path, {record.bytes, record.sha256}, 1024, send).ok());
  FlipBytes(record.model_path);
  sent = 0;
  const absl::Status exported =
      base::StreamVerifiedFile(record.model_path, {record.bytes, record.sha256}, 1024, send);
  EXPECT_EQ(exported.code(), absl::StatusCode::kDataLoss) << exported;
  EXPECT_THAT(std::string(exported.message()), HasSubstr(record.model_path));
  EXPECT_EQ(sent, record.bytes);
}

}  // namespace
}  // namespace slimfit::server
