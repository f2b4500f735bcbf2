// Test-only: a JobRunner on in-process workers, for the runner's tests of spot-check rollbacks and
// evaluations (job_runner_rollback_test.cc, job_runner_evaluation_test.cc). The tiny job of
// job_runner_test.cc — TestModelConfig, 16-token sequences of a 1,024-token stream, SGD at
// learning rate 0.5 without warm-up (the step is linear in the gradient, so a reference stepped
// here matches the runner's to rounding) — on a real registry, state store and job directory, its
// workers TestWorkerServices behind gRPC in-process channels computing real engine gradients at
// the runner's published parameters.
//
//   JobRunnerFixture::SetUp        the job stored RUNNING; set job_.spec() fields and PutJob again
//                                  before NewRunner to change it
//   AddWorker()                    a live, registered worker: its service and its worker id
//   NewRunner()                    a runner of the job as stored, made current (runner_)
//   Events(), CompletedRounds()    what the runner emitted (the event observer; on_event_ too)
//   CheckpointParameters(round)    the parameters the runner wrote for a round
//   ReferenceParameters(rounds)    the optimizer stepped here on the exact whole-batch gradients
//
// Waiting: on conditions only (JobRunner::AwaitTerminal, the event observer), each with a generous
// real-time safety net (kSafety); nothing sleeps.
#ifndef SLIMFIT_SERVER_JOB_RUNNER_TEST_FIXTURE_H_
#define SLIMFIT_SERVER_JOB_RUNNER_TEST_FIXTURE_H_

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/test_util.h"
#include "performer/gradient_engine.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/safetensors.h"
#include "performer/trainer.h"
#include "server/job_runner.h"
#include "server/test_job_spec.h"
#include "server/test_worker_request.h"
#include "server/test_worker_service.h"
#include "wire/engine_settings.h"

namespace slimfit::server {

class JobRunnerFixture : public ::testing::Test {
 protected:
  static constexpr char kJobId[] = "job-000001";
  static constexpr int64_t kLength = 16;
  static constexpr int64_t kTokensPerRound = 4 * kLength;
  static constexpr absl::Duration kSafety = absl::Seconds(120);  // a safety net, never the expected wait

  // A registered worker.
  struct Worker {
    TestWorkerService* service = nullptr;
    std::string id;
  };

  void SetUp() override {
    root_ = testing_util::TempPath(
        absl::StrCat("job_runner_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(root_);
    job_dir_ = absl::StrCat(root_, "/jobs/", kJobId);
    std::filesystem::create_directories(job_dir_);
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
    spec.mutable_optimizer()->mutable_sgd();
    spec.mutable_optimizer()->set_learning_rate(0.5);
    spec.mutable_optimizer()->set_warmup_steps(0);
    spec.set_seed(7);
    spec.set_verify_fraction(0);
    job_.set_job_id(kJobId);
    job_.set_state(v1::JOB_STATE_RUNNING);
    ASSERT_TRUE(store_->PutJob(job_).ok());
  }

  void TearDown() override {
    for (const Worker& worker : workers_) worker.service->EndHangingCalls();
    if (runner_ != nullptr) runner_->Stop();
  }

  // The job's data: 1,024 tokens in four documents, job_.spec()'s held-out fraction and seed.
  absl::StatusOr<JobData> Data() const {
    rpc::TokenStream stream;
    for (int i = 0; i < 1024; ++i) stream.tokens.push_back((i * 7 + i / 13) % 251);
    stream.doc_starts = {0, 100, 350, 700};
    return JobData::Create(std::move(stream), 256, kLength, kTokensPerRound, job_.spec().held_out_fraction(),
                           job_.spec().seed());
  }

  static std::vector<at::Tensor> Initial() {
    return performer::PerformerModel::Create(TestModelConfig(), performer::DType::kFloat32, at::kCPU,
                                             /*seed=*/3)
        ->parameters();
  }

  static performer::PerformerModel ModelAt(const std::vector<at::Tensor>& parameters) {
    std::map<std::string, at::Tensor> tensors;
    const std::vector<std::string> names = performer::ParameterNames(TestModelConfig());
    for (size_t i = 0; i < names.size(); ++i) tensors[names[i]] = parameters[i].clone();
    return *performer::PerformerModel::FromTensors(TestModelConfig(), tensors, performer::DType::kFloat32,
                                                   at::kCPU);
  }

  // A live worker computing at the current runner's published parameters.
  Worker AddWorker() {
    const std::string address = absl::StrCat("127.0.0.1:", 50001 + workers_.size());
    Worker worker;
    worker.service = fleet_.Add(
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
          return std::make_shared<const performer::PerformerModel>(ModelAt((*snapshot)->tensors));
        });
    v1::RegisterWorkerRequest request = TestWorkerRequest();
    request.set_advertise_address(address);
    absl::StatusOr<v1::RegisterWorkerResponse> registered = registry_->Register(request, std::nullopt);
    EXPECT_TRUE(registered.ok()) << registered.status();
    if (registered.ok()) worker.id = registered->worker_id();
    workers_.push_back(worker);
    return worker;
  }

  // A runner for the job as stored, made current.
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
      const performer::PerformerModel model = ModelAt(trainer->parameters());
      const std::vector<SequenceRef> sequences = data.RoundSequences(round);
      performer::GradientOptions options;
      options.loss_normalizer = data.PredictedTokens(sequences);
      options.feature_seed = job_.spec().seed();
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
  std::vector<Worker> workers_;
  std::function<void(const v1::JobEvent&)> on_event_;  // set before the runner starts
  absl::Mutex events_mutex_;
  std::vector<v1::JobEvent> events_ ABSL_GUARDED_BY(events_mutex_);
  absl::Mutex runner_mutex_;
  std::unique_ptr<JobRunner> runner_;  // written under runner_mutex_; the test thread reads it freely
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_JOB_RUNNER_TEST_FIXTURE_H_
