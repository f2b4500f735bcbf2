// JobRunner in-process: a tiny job's rounds on in-process workers (TestWorkerService: real gRPC
// in-process channels, real engine gradients at the runner's published parameters), on a real
// registry, state store and job directory. The final parameters are checked against the optimizer
// stepped here on the exact whole-batch gradient; a stopped runner's job is resumed by a second
// runner from its checkpoint; Cancel and rounds whose shards fail everywhere end the job.
//
// Waiting: on conditions only (JobRunner::AwaitTerminal, TestWorkerService::AwaitCalls, the job's
// EventSignal, a Notification from the event observer), each with a generous real-time safety
// net; no test sleeps.
#include "server/job_runner.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/test_util.h"
#include "performer/gradient_engine.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/safetensors.h"
#include "performer/trainer.h"
#include "server/test_job_spec.h"
#include "server/test_worker_request.h"
#include "server/test_worker_service.h"
#include "wire/engine_settings.h"

namespace slimfit::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Behaviour = TestWorkerService::Behaviour;

constexpr char kJobId[] = "job-000001";
constexpr int64_t kLength = 16;
constexpr int64_t kTokensPerRound = 4 * kLength;
constexpr uint64_t kSeed = 7;
constexpr absl::Duration kSafety = absl::Seconds(60);  // a safety net, never the expected wait

class JobRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing_util::TempPath(
        absl::StrCat("job_runner_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    job_dir_ = absl::StrCat(root_, "/jobs/", kJobId);
    fs::create_directories(job_dir_);
    store_ = *StateStore::Open(absl::StrCat(root_, "/state.db"));
    RegistryOptions registry_options;
    registry_options.lost_after = absl::Seconds(10);
    registry_options.clock = &clock_;  // never advanced: no worker is ever found silent
    registry_options.stub_factory = fleet_.StubFactory();
    registry_ = *WorkerRegistry::Create(store_.get(), registry_options);

    v1::JobSpec& spec = *job_.mutable_spec();
    *spec.mutable_model()->mutable_config() = TestModelConfigProto();
    spec.set_sequence_length(kLength);
    spec.set_tokens_per_round(kTokensPerRound);
    spec.set_rounds(3);
    spec.set_checkpoint_interval_rounds(1);
    // SGD, no warm-up: the step is linear in the gradient, so the reference below matches the
    // runner's to rounding.
    spec.mutable_optimizer()->mutable_sgd();
    spec.mutable_optimizer()->set_learning_rate(0.5);
    spec.mutable_optimizer()->set_warmup_steps(0);
    spec.set_seed(kSeed);
    job_.set_job_id(kJobId);
    job_.set_state(v1::JOB_STATE_RUNNING);
    ASSERT_TRUE(store_->PutJob(job_).ok());
  }

  void TearDown() override {
    for (TestWorkerService* worker : workers_) worker->EndHangingCalls();
    if (runner_ != nullptr) runner_->Stop();
  }

  static absl::StatusOr<JobData> Data() {
    rpc::TokenStream stream;
    for (int i = 0; i < 1024; ++i) stream.tokens.push_back((i * 7 + i / 13) % 251);
    stream.doc_starts = {0, 100, 350, 700};
    return JobData::Create(std::move(stream), 256, kLength, kTokensPerRound, /*held_out_fraction=*/0, kSeed);
  }

  static std::vector<at::Tensor> Initial() {
    return performer::PerformerModel::Create(TestModelConfig(), performer::DType::kFloat32, at::kCPU,
                                             /*seed=*/3)
        ->parameters();
  }

  // A live worker computing at the current runner's published parameters.
  TestWorkerService* AddWorker() {
    const std::string address = absl::StrCat("127.0.0.1:", 50001 + workers_.size());
    TestWorkerService* service = fleet_.Add(
        address,
        [this](const std::string& job,
               uint64_t version) -> absl::StatusOr<std::shared_ptr<const performer::PerformerModel>> {
          if (job != kJobId) return absl::NotFoundError("no such job");
          absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> snapshot;
          {
            absl::MutexLock lock(&runner_mutex_);
            if (runner_ == nullptr) return absl::UnavailableError("no runner");
            snapshot = runner_->Parameters(version);
          }
          if (!snapshot.ok()) return snapshot.status();
          std::map<std::string, at::Tensor> tensors;
          for (size_t i = 0; i < (*snapshot)->names.size(); ++i) {
            tensors[(*snapshot)->names[i]] = (*snapshot)->tensors[i].clone();
          }
          absl::StatusOr<performer::PerformerModel> model = performer::PerformerModel::FromTensors(
              (*snapshot)->config, tensors, (*snapshot)->dtype, at::kCPU);
          if (!model.ok()) return model.status();
          return std::make_shared<const performer::PerformerModel>(*std::move(model));
        });
    v1::RegisterWorkerRequest request = TestWorkerRequest();
    request.set_advertise_address(address);
    absl::StatusOr<v1::RegisterWorkerResponse> registered = registry_->Register(request, std::nullopt);
    EXPECT_TRUE(registered.ok()) << registered.status();
    workers_.push_back(service);
    return service;
  }

  // A runner for the job as stored (fresh, or resuming from its checkpoints), made current.
  absl::Status NewRunner() {
    absl::StatusOr<JobData> data = Data();
    if (!data.ok()) return data.status();
    RunnerDeps deps;
    deps.store = store_.get();
    deps.registry = registry_.get();
    deps.leases = &leases_;
    deps.signal = &signal_;
    deps.job_dir = job_dir_;
    deps.options.shard_timeout = absl::Seconds(60);
    deps.options.max_attempts = 2;
    deps.event_observer = [this](const v1::JobEvent& event) {
      if (on_event_) on_event_(event);
      absl::MutexLock lock(&events_mutex_);
      events_.push_back(event);
    };
    deps.initial_parameters = [] { return Initial(); };
    absl::StatusOr<std::optional<v1::Job>> stored = store_->GetJob(kJobId);
    if (!stored.ok()) return stored.status();
    absl::StatusOr<std::unique_ptr<JobRunner>> runner =
        JobRunner::Create(stored->value(), *std::move(data), TestModelConfig(), Initial(), std::move(deps));
    if (!runner.ok()) return runner.status();
    absl::MutexLock lock(&runner_mutex_);
    runner_ = *std::move(runner);
    return absl::OkStatus();
  }

  // Stops the current runner; workers then find none.
  void StopRunner() {
    runner_->Stop();
    absl::MutexLock lock(&runner_mutex_);
    runner_.reset();
  }

  std::vector<v1::JobEvent> Events() {
    absl::MutexLock lock(&events_mutex_);
    return events_;
  }
  std::vector<int64_t> CompletedRounds() {
    std::vector<int64_t> rounds;
    for (const v1::JobEvent& event : Events()) {
      if (event.has_round_completed()) rounds.push_back(event.round_completed().round());
    }
    return rounds;
  }

  // The parameters of the checkpoint of `round`, as written.
  absl::StatusOr<std::vector<at::Tensor>> CheckpointParameters(int64_t round) {
    absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_->Checkpoints(kJobId);
    if (!checkpoints.ok()) return checkpoints.status();
    for (const CheckpointRecord& checkpoint : *checkpoints) {
      if (checkpoint.round != round) continue;
      absl::StatusOr<performer::TensorFile> file = performer::ReadSafetensors(checkpoint.model_path);
      if (!file.ok()) return file.status();
      std::vector<at::Tensor> parameters;
      for (const std::string& name : performer::ParameterNames(TestModelConfig())) {
        parameters.push_back(file->tensors.at(name));
      }
      return parameters;
    }
    return absl::NotFoundError(absl::StrCat("no checkpoint of round ", round));
  }

  // The parameters after `rounds` optimizer steps on the exact whole-batch gradients, here.
  std::vector<at::Tensor> ReferenceParameters(int64_t rounds) {
    const JobData data = *Data();
    std::unique_ptr<performer::Trainer> trainer =
        *performer::Trainer::Create(TestModelConfig(), performer::DType::kFloat32, Initial(),
                                    wire::OptimizerSettingsOf(job_.spec().optimizer()));
    for (int64_t round = 1; round <= rounds; ++round) {
      std::map<std::string, at::Tensor> tensors;
      for (size_t i = 0; i < trainer->names().size(); ++i) {
        tensors[trainer->names()[i]] = trainer->parameters()[i].clone();
      }
      const performer::PerformerModel model = *performer::PerformerModel::FromTensors(
          TestModelConfig(), tensors, performer::DType::kFloat32, at::kCPU);
      const std::vector<SequenceRef> sequences = data.RoundSequences(round);
      performer::GradientOptions options;
      options.loss_normalizer = data.PredictedTokens(sequences);
      options.feature_seed = kSeed;
      std::vector<at::Tensor> sum;
      for (const SequenceRef& sequence : sequences) {
        performer::PackedBatch batch;
        data.Gather({sequence}, &batch.tokens, &batch.doc_starts);
        if (performer::PredictedTokenCount(batch) == 0) continue;
        absl::StatusOr<performer::GradientResult> result =
            performer::ComputeGradient(model, batch, performer::Plan(), options);
        EXPECT_TRUE(result.ok()) << result.status();
        if (!result.ok()) return {};
        if (sum.empty()) {
          sum = result->gradients;
        } else {
          for (size_t i = 0; i < sum.size(); ++i) sum[i] = sum[i] + result->gradients[i];
        }
      }
      EXPECT_TRUE(trainer->Step(std::move(sum)).ok());
    }
    std::vector<at::Tensor> parameters;
    for (const at::Tensor& parameter : trainer->parameters()) parameters.push_back(parameter.clone());
    return parameters;
  }

  std::string root_;
  std::string job_dir_;
  v1::Job job_;
  base::ManualClock clock_;
  TestWorkerFleet fleet_;  // outlives the registry, which holds its stubs
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  EventSignal signal_;
  WorkerLeases leases_;
  std::vector<TestWorkerService*> workers_;
  std::function<void(const v1::JobEvent&)> on_event_;  // set before the runner starts
  absl::Mutex events_mutex_;
  std::vector<v1::JobEvent> events_ ABSL_GUARDED_BY(events_mutex_);
  absl::Mutex runner_mutex_;
  std::unique_ptr<JobRunner> runner_;  // written under runner_mutex_; the test thread reads it freely
};

TEST_F(JobRunnerTest, RoundsOnTwoWorkersStepTheOptimizerOnTheWholeBatchGradient) {
  TestWorkerService* a = AddWorker();
  TestWorkerService* b = AddWorker();
  ASSERT_TRUE(NewRunner().ok());
  EXPECT_EQ(runner_->Snapshot().progress().parameter_version(), 1u);
  runner_->Start();
  ASSERT_TRUE(runner_->AwaitTerminal(absl::Now() + kSafety));

  const v1::Job job = runner_->Snapshot();
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.state_reason();
  EXPECT_EQ(job.progress().rounds_completed(), 3);
  EXPECT_EQ(job.progress().parameters_round(), 3);
  EXPECT_EQ(job.progress().parameter_version(), 4u);
  const JobData data = *Data();
  int64_t tokens = 0;
  for (int64_t round = 1; round <= 3; ++round) tokens += data.PredictedTokens(data.RoundSequences(round));
  EXPECT_EQ(job.progress().tokens_trained(), tokens);
  EXPECT_EQ(CompletedRounds(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_GT(a->calls(), 0);
  EXPECT_GT(b->calls(), 0);
  // A finished job's parameters are no longer served.
  EXPECT_EQ(runner_->Parameters(4).status().code(), absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::vector<at::Tensor>> final_parameters = CheckpointParameters(3);
  ASSERT_TRUE(final_parameters.ok()) << final_parameters.status();
  const std::vector<at::Tensor> initial = Initial();
  const std::vector<at::Tensor> expected = ReferenceParameters(3);
  ASSERT_EQ(final_parameters->size(), expected.size());
  bool changed = false;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(at::allclose((*final_parameters)[i], expected[i], 1e-4, 1e-6)) << i;
    changed = changed || !at::equal((*final_parameters)[i], initial[i]);
  }
  EXPECT_TRUE(changed);
}

TEST_F(JobRunnerTest, ASecondRunnerResumesFromTheCheckpointAndFinishes) {
  TestWorkerService* a = AddWorker();
  TestWorkerService* b = AddWorker();
  // Once round 1 is done every call of round 2 hangs, so that the runner is stopped in round 2
  // whenever the stop comes.
  absl::Notification round_one;
  on_event_ = [a, b, &round_one](const v1::JobEvent& event) {
    if (event.has_round_completed() && event.round_completed().round() == 1) {
      a->SetBehaviour(Behaviour::kHangs);
      b->SetBehaviour(Behaviour::kHangs);
      round_one.Notify();
    }
  };
  ASSERT_TRUE(NewRunner().ok());
  runner_->Start();
  ASSERT_TRUE(round_one.WaitForNotificationWithTimeout(kSafety));
  StopRunner();
  // Stopped, not ended: the job is still RUNNING, and round 1's checkpoint is recorded.
  EXPECT_EQ(store_->GetJob(kJobId)->value().state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(CheckpointParameters(1).ok());
  EXPECT_EQ(CompletedRounds(), std::vector<int64_t>{1});

  a->EndHangingCalls();
  b->EndHangingCalls();
  a->SetBehaviour(Behaviour::kHonest);
  b->SetBehaviour(Behaviour::kHonest);
  on_event_ = nullptr;
  ASSERT_TRUE(NewRunner().ok());
  EXPECT_EQ(runner_->Snapshot().progress().parameters_round(), 1);
  runner_->Start();
  ASSERT_TRUE(runner_->AwaitTerminal(absl::Now() + kSafety));
  const v1::Job job = runner_->Snapshot();
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.state_reason();
  EXPECT_EQ(job.progress().rounds_completed(), 3);
  // Round 1 ran once: the second runner went on from its checkpoint.
  EXPECT_EQ(CompletedRounds(), (std::vector<int64_t>{1, 2, 3}));
  bool resumed = false;
  for (const v1::JobEvent& event : Events()) {
    if (event.has_resumed()) {
      resumed = true;
      EXPECT_EQ(event.resumed().round(), 1);
      EXPECT_EQ(event.resumed().reason(), v1::JobResumed::REASON_COORDINATOR_RESTART);
    }
  }
  EXPECT_TRUE(resumed);
  absl::StatusOr<std::vector<at::Tensor>> final_parameters = CheckpointParameters(3);
  ASSERT_TRUE(final_parameters.ok()) << final_parameters.status();
  const std::vector<at::Tensor> expected = ReferenceParameters(3);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(at::allclose((*final_parameters)[i], expected[i], 1e-4, 1e-6)) << i;
  }
}

TEST_F(JobRunnerTest, CancelEndsARunningJobWithTheReason) {
  TestWorkerService* a = AddWorker();
  a->SetBehaviour(Behaviour::kHangs);
  ASSERT_TRUE(NewRunner().ok());
  runner_->Start();
  ASSERT_TRUE(a->AwaitCalls(1, kSafety));  // round 1 is running: its call hangs
  runner_->Cancel("enough");
  ASSERT_TRUE(runner_->AwaitTerminal(absl::Now() + kSafety));
  const v1::Job job = runner_->Snapshot();
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.state_reason(), "cancelled by client: enough");
  EXPECT_EQ(job.progress().rounds_completed(), 0);
  // AwaitTerminal returns once the terminal state is stored: what CancelJob acknowledges survives
  // a crash right after.
  EXPECT_EQ(store_->GetJob(kJobId)->value().state(), v1::JOB_STATE_CANCELLED);
  // Cancelling a terminal job changes nothing.
  runner_->Cancel("again");
  EXPECT_EQ(runner_->Snapshot().state_reason(), "cancelled by client: enough");
}

// A QUEUED job with no worker to run on waits for one (the planner); Cancel ends that wait.
TEST_F(JobRunnerTest, CancelEndsAJobWaitingForWorkers) {
  job_.set_state(v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(store_->PutJob(job_).ok());
  ASSERT_TRUE(NewRunner().ok());
  runner_->Start();
  const absl::Time deadline = absl::Now() + kSafety;
  uint64_t seen = runner_->events().count();
  while (!absl::StartsWith(runner_->Snapshot().state_reason(), "waiting for ") && absl::Now() < deadline) {
    seen = runner_->events().WaitAfter(seen, absl::Seconds(1));
  }
  ASSERT_THAT(runner_->Snapshot().state_reason(), HasSubstr("waiting for 1 eligible worker"));
  EXPECT_EQ(runner_->Snapshot().state(), v1::JOB_STATE_QUEUED);
  runner_->Cancel("no workers today");
  ASSERT_TRUE(runner_->AwaitTerminal(absl::Now() + kSafety));
  EXPECT_EQ(runner_->Snapshot().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(runner_->Snapshot().state_reason(), "cancelled by client: no workers today");
  EXPECT_TRUE(CompletedRounds().empty());
}

// A round whose shard fails on every attempt (RunnerOptions::max_attempts, 2 here) fails the job:
// no retry of the round, no step, the message says why.
TEST_F(JobRunnerTest, ARoundWhoseShardsFailEverywhereFailsTheJob) {
  AddWorker()->SetBehaviour(Behaviour::kFails);
  AddWorker()->SetBehaviour(Behaviour::kFails);
  ASSERT_TRUE(NewRunner().ok());
  runner_->Start();
  ASSERT_TRUE(runner_->AwaitTerminal(absl::Now() + kSafety));
  const v1::Job job = runner_->Snapshot();
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.state_reason(), HasSubstr("failed 2 times"));
  EXPECT_EQ(job.progress().rounds_completed(), 0);
  EXPECT_EQ(job.progress().parameter_version(), 1u);
  EXPECT_TRUE(CompletedRounds().empty());
  runner_->Stop();  // joined: the terminal state is stored
  EXPECT_EQ(store_->GetJob(kJobId)->value().state(), v1::JOB_STATE_FAILED);
}

}  // namespace
}  // namespace slimfit::server
