// A local-steps job (JobSpec.local_steps, outer_optimizer; DiLoCo) run by the coordinator's
// JobRunner on real worker::WorkerServices, in-process: each worker's inner AdamW steps over its
// share of the round's batches, its weighted pseudo-gradient, their sum and the outer Nesterov
// step — checked against the same computed here independently (a performer::Trainer per worker for
// the inner steps, one for the outer step, the engine's exact gradients).
//
// Only the network is replaced: the workers' Worker services are served on gRPC in-process
// channels that the registry reaches through its stub factory, and the parameters they fetch come
// from a minimal Coordinator service (FetchParameters only, whole parameters, as
// CoordinatorService sends them) that reads the runner's published versions. This test lives in
// tests/ because server/ and worker/ may not depend on each other. No test sleeps.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/test_util.h"
#include "performer/gradient_engine.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/safetensors.h"
#include "performer/trainer.h"
#include "planner/device_profile_io.h"
#include "planner/plan_proto.h"
#include "proto/slimfit.grpc.pb.h"
#include "rpc/rpc_util.h"
#include "server/job_runner.h"
#include "server/test_job_spec.h"
#include "server/test_worker_request.h"
#include "wire/engine_settings.h"
#include "wire/tensor_chunks.h"
#include "worker/parameter_cache.h"
#include "worker/worker_identity.h"
#include "worker/worker_service.h"

namespace slimfit {
namespace {

namespace fs = std::filesystem;
using server::JobData;
using server::JobRunner;
using server::ParameterSnapshot;
using server::SequenceRef;

constexpr char kJobId[] = "job-000001";
constexpr int64_t kLength = 16;
constexpr int64_t kTokensPerRound = 4 * kLength;  // 4 sequences per inner step: 2 per worker
constexpr int kInnerSteps = 2;
constexpr int64_t kRounds = 3;
constexpr uint64_t kSeed = 7;
constexpr int kWorkers = 2;
constexpr absl::Duration kSafety = absl::Seconds(120);  // a safety net, never the expected wait

// FetchParameters of the current runner's published versions, whole (the job compresses nothing),
// as CoordinatorService answers it; the workers' credentials are not checked (not under test).
class RunnerParameters final : public v1::Coordinator::Service {
 public:
  void SetRunner(JobRunner* runner) {
    absl::MutexLock lock(&mutex_);
    runner_ = runner;
  }

  grpc::Status FetchParameters(grpc::ServerContext* context, const v1::FetchParametersRequest* request,
                               grpc::ServerWriter<v1::FetchParametersResponse>* writer) override {
    absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> snapshot = absl::UnavailableError("no runner");
    {
      absl::MutexLock lock(&mutex_);
      if (runner_ != nullptr) snapshot = runner_->Parameters(request->parameter_version());
    }
    if (!snapshot.ok()) return rpc::ToGrpcStatus(snapshot.status(), context);
    const ParameterSnapshot& parameters = **snapshot;
    v1::FetchParametersResponse message;
    v1::ParameterManifest* manifest = message.mutable_manifest();
    manifest->set_job_id(request->job_id());
    manifest->set_parameter_version(parameters.version);
    *manifest->mutable_config() = planner::ModelConfigToProto(parameters.config);
    manifest->set_dtype(planner::DTypeToProto(parameters.dtype));
    int64_t total = 0;
    for (size_t i = 0; i < parameters.names.size(); ++i) {
      performer::TensorSpec spec{parameters.names[i], parameters.tensors[i].sizes().vec()};
      *manifest->add_tensors() = performer::ToTensorInfo(spec, parameters.dtype);
      total += manifest->tensors(static_cast<int>(i)).bytes();
    }
    manifest->set_total_bytes(total);
    manifest->set_feature_seed(parameters.feature_seed);
    if (!writer->Write(message)) return grpc::Status(grpc::StatusCode::CANCELLED, "worker went away");
    const absl::Status streamed = performer::ChunkTensors(
        parameters.names, parameters.tensors, parameters.dtype, [&](const v1::TensorChunk& chunk) {
          v1::FetchParametersResponse piece;
          *piece.mutable_chunk() = chunk;
          return writer->Write(piece);
        });
    return rpc::ToGrpcStatus(streamed, context);
  }

 private:
  absl::Mutex mutex_;
  JobRunner* runner_ ABSL_GUARDED_BY(mutex_) = nullptr;
};

// One slimfit-worker's service and what it needs, served in-process.
struct Worker {
  std::unique_ptr<worker::WorkerIdentity> identity;
  std::unique_ptr<worker::ParameterCache> cache;
  std::unique_ptr<worker::WorkerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;  // as registered: what the registry's stub factory is asked for
  std::string id;
};

class LocalStepsRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing_util::TempPath(
        absl::StrCat("local_steps_runner_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    job_dir_ = absl::StrCat(root_, "/jobs/", kJobId);
    fs::create_directories(job_dir_);
    store_ = *server::StateStore::Open(absl::StrCat(root_, "/state.db"));

    grpc::ServerBuilder builder;
    builder.RegisterService(&parameters_);
    parameter_server_ = builder.BuildAndStart();
    ASSERT_NE(parameter_server_, nullptr);

    server::RegistryOptions registry_options;
    registry_options.lost_after = absl::Seconds(10);
    registry_options.clock = &clock_;  // never advanced: no worker is ever found silent
    registry_options.stub_factory =
        [this](const std::string& address) -> absl::StatusOr<std::shared_ptr<v1::Worker::StubInterface>> {
      for (const std::unique_ptr<Worker>& worker : workers_) {
        if (worker->address == address) {
          return std::shared_ptr<v1::Worker::StubInterface>(
              v1::Worker::NewStub(worker->server->InProcessChannel(grpc::ChannelArguments())));
        }
      }
      return absl::InvalidArgumentError(absl::StrCat("no worker at ", address));
    };
    registry_ = *server::WorkerRegistry::Create(store_.get(), registry_options);

    v1::JobSpec& spec = *job_.mutable_spec();
    *spec.mutable_model()->mutable_config() = server::TestModelConfigProto();
    spec.set_sequence_length(kLength);
    spec.set_tokens_per_round(kTokensPerRound);
    spec.set_rounds(kRounds);
    spec.set_checkpoint_interval_rounds(1);
    spec.set_seed(kSeed);
    spec.set_verify_fraction(0);  // spot checks need synchronous rounds
    // Inner: AdamW, whose moments and step count stay on each worker from round to round.
    spec.mutable_optimizer()->mutable_adamw();
    spec.mutable_optimizer()->set_learning_rate(1e-2);
    spec.mutable_optimizer()->set_warmup_steps(0);
    spec.set_local_steps(kInnerSteps);
    // Outer: DiLoCo's Nesterov SGD, spelled out (the job's defaults are filled in at submission).
    v1::Optimizer& outer = *spec.mutable_outer_optimizer();
    outer.mutable_sgd()->set_momentum(0.9);
    outer.mutable_sgd()->set_nesterov(true);
    outer.set_learning_rate(0.7);
    outer.set_warmup_steps(0);
    job_.set_job_id(kJobId);
    job_.set_state(v1::JOB_STATE_RUNNING);
    ASSERT_TRUE(store_->PutJob(job_).ok());
  }

  void TearDown() override {
    if (runner_ != nullptr) runner_->Stop();
    parameters_.SetRunner(nullptr);
    for (const std::unique_ptr<Worker>& worker : workers_) {
      worker->server->Shutdown(std::chrono::system_clock::now());
    }
    parameter_server_->Shutdown(std::chrono::system_clock::now());
  }

  absl::StatusOr<JobData> Data() const {
    rpc::TokenStream stream;
    for (int i = 0; i < 1024; ++i) stream.tokens.push_back((i * 7 + i / 13) % 251);
    stream.doc_starts = {0, 100, 350, 700};
    return JobData::Create(std::move(stream), 256, kLength, kTokensPerRound, /*held_out_fraction=*/0, kSeed);
  }

  static std::vector<at::Tensor> Initial() {
    return performer::PerformerModel::Create(server::TestModelConfig(), performer::DType::kFloat32, at::kCPU,
                                             /*seed=*/3)
        ->parameters();
  }

  static performer::PerformerModel ModelAt(const std::vector<at::Tensor>& parameters) {
    std::map<std::string, at::Tensor> tensors;
    const std::vector<std::string> names = performer::ParameterNames(server::TestModelConfig());
    for (size_t i = 0; i < names.size(); ++i) tensors[names[i]] = parameters[i].clone();
    return *performer::PerformerModel::FromTensors(server::TestModelConfig(), tensors,
                                                   performer::DType::kFloat32, at::kCPU);
  }

  // A slimfit-worker's service (its profile and budget as registered), registered with the
  // coordinator's registry.
  Worker* AddWorker() {
    auto worker = std::make_unique<Worker>();
    worker->address = absl::StrCat("127.0.0.1:", 50001 + workers_.size());  // a name only: in-process
    const v1::RegisterWorkerRequest request = server::TestWorkerRequest();
    worker->identity = std::make_unique<worker::WorkerIdentity>("", "wc-test");
    worker::ParameterCache::Options cache_options;
    cache_options.coordinator =
        v1::Coordinator::NewStub(parameter_server_->InProcessChannel(grpc::ChannelArguments()));
    cache_options.identity = worker->identity.get();
    worker->cache = std::make_unique<worker::ParameterCache>(cache_options);
    worker::WorkerService::Options options;
    options.identity = worker->identity.get();
    options.profile = planner::DeviceProfileFromProto(request.profile());
    options.calibrated_at = absl::FromUnixSeconds(1700000000);
    options.memory_budget_bytes = request.memory_budget_bytes();
    options.threads = 1;
    options.cache = worker->cache.get();
    worker->service = std::make_unique<worker::WorkerService>(options);
    grpc::ServerBuilder builder;
    builder.RegisterService(worker->service.get());
    worker->server = builder.BuildAndStart();
    EXPECT_NE(worker->server, nullptr);
    workers_.push_back(std::move(worker));
    Worker* added = workers_.back().get();

    v1::RegisterWorkerRequest registration = request;
    registration.set_advertise_address(added->address);
    absl::StatusOr<v1::RegisterWorkerResponse> registered = registry_->Register(registration, std::nullopt);
    EXPECT_TRUE(registered.ok()) << registered.status();
    if (registered.ok()) {
      added->id = registered->worker_id();
      added->identity->SetCoordinatorToken(registered->coordinator_token());
      added->service->SetWorkerId(added->id);
    }
    return added;
  }

  absl::Status NewRunner() {
    absl::StatusOr<JobData> data = Data();
    if (!data.ok()) return data.status();
    server::RunnerDeps deps;
    deps.store = store_.get();
    deps.registry = registry_.get();
    deps.leases = &leases_;
    deps.signal = &signal_;
    deps.job_dir = job_dir_;
    deps.options.shard_timeout = absl::Seconds(60);
    deps.options.max_attempts = 2;
    deps.event_observer = [this](const v1::JobEvent& event) {
      absl::MutexLock lock(&events_mutex_);
      events_.push_back(event);
    };
    deps.initial_parameters = [] { return Initial(); };
    absl::StatusOr<std::optional<v1::Job>> stored = store_->GetJob(kJobId);
    if (!stored.ok()) return stored.status();
    absl::StatusOr<std::unique_ptr<JobRunner>> runner = JobRunner::Create(
        stored->value(), *std::move(data), server::TestModelConfig(), Initial(), std::move(deps));
    if (!runner.ok()) return runner.status();
    runner_ = *std::move(runner);
    parameters_.SetRunner(runner_.get());
    return absl::OkStatus();
  }

  std::vector<v1::JobEvent> Events() {
    absl::MutexLock lock(&events_mutex_);
    return events_;
  }

  absl::StatusOr<std::vector<at::Tensor>> CheckpointParameters(int64_t round) {
    absl::StatusOr<std::vector<server::CheckpointRecord>> checkpoints = store_->Checkpoints(kJobId);
    if (!checkpoints.ok()) return checkpoints.status();
    for (const server::CheckpointRecord& checkpoint : *checkpoints) {
      if (checkpoint.round != round) continue;
      absl::StatusOr<performer::TensorFile> file = performer::ReadSafetensors(checkpoint.model_path);
      if (!file.ok()) return file.status();
      std::vector<at::Tensor> parameters;
      for (const std::string& name : performer::ParameterNames(server::TestModelConfig())) {
        parameters.push_back(file->tensors.at(name));
      }
      return parameters;
    }
    return absl::NotFoundError(absl::StrCat("no checkpoint of round ", round));
  }

  // The exact gradient of the mean loss of `sequences` at `parameters`; empty when they predict
  // nothing.
  std::vector<at::Tensor> MeanLossGradient(const JobData& data, const std::vector<at::Tensor>& parameters,
                                           const std::vector<SequenceRef>& sequences) {
    const performer::PerformerModel model = ModelAt(parameters);
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
    return sum;
  }

  // The job computed here: every round, worker w (by its place among the round's plans: the
  // registry lists workers by id, so the same worker every round) takes one inner step per batch
  // over its half of that batch (equally fast workers: ShareOut gives the first half to the first),
  // each step on the exact gradient of its half's mean loss, with an inner optimizer of its own
  // that keeps its state from round to round; its pseudo-gradient (start − end) is weighted by its
  // predicted tokens over the round's; the outer optimizer steps on their sum.
  std::vector<at::Tensor> ReferenceParameters() {
    const JobData data = *Data();
    const v1::JobSpec& spec = job_.spec();
    std::unique_ptr<performer::Trainer> outer =
        *performer::Trainer::Create(server::TestModelConfig(), performer::DType::kFloat32, Initial(),
                                    wire::OptimizerSettingsOf(spec.outer_optimizer()));
    std::vector<std::unique_ptr<performer::Trainer>> inner(kWorkers);
    for (int64_t round = 1; round <= kRounds; ++round) {
      std::vector<at::Tensor> start;
      for (const at::Tensor& parameter : outer->parameters()) start.push_back(parameter.clone());
      std::vector<std::vector<SequenceRef>> batches;
      std::vector<SequenceRef> all;
      for (int h = 0; h < kInnerSteps; ++h) {
        batches.push_back(data.RoundSequences((round - 1) * kInnerSteps + h + 1));
        all.insert(all.end(), batches.back().begin(), batches.back().end());
      }
      const int64_t round_tokens = data.PredictedTokens(all);
      std::vector<at::Tensor> pseudo_gradient;
      for (const at::Tensor& parameter : start) pseudo_gradient.push_back(at::zeros_like(parameter));
      for (int w = 0; w < kWorkers; ++w) {
        std::vector<at::Tensor> copy;
        for (const at::Tensor& parameter : start) copy.push_back(parameter.clone());
        if (inner[w] == nullptr) {
          inner[w] =
              *performer::Trainer::Create(server::TestModelConfig(), performer::DType::kFloat32,
                                          std::move(copy), wire::OptimizerSettingsOf(spec.optimizer()));
        } else {
          EXPECT_TRUE(inner[w]->SetParameters(copy).ok());
        }
        int64_t shard_tokens = 0;
        for (const std::vector<SequenceRef>& batch : batches) {
          const size_t half = batch.size() / kWorkers;
          const std::vector<SequenceRef> share(batch.begin() + static_cast<std::ptrdiff_t>(w * half),
                                               batch.begin() + static_cast<std::ptrdiff_t>((w + 1) * half));
          const int64_t tokens = data.PredictedTokens(share);
          if (tokens == 0) continue;
          EXPECT_TRUE(inner[w]->Step(MeanLossGradient(data, inner[w]->parameters(), share)).ok());
          shard_tokens += tokens;
        }
        const double weight = static_cast<double>(shard_tokens) / static_cast<double>(round_tokens);
        for (size_t i = 0; i < start.size(); ++i) {
          pseudo_gradient[i] += (start[i] - inner[w]->parameters()[i]) * weight;
        }
      }
      EXPECT_TRUE(outer->Step(std::move(pseudo_gradient)).ok());
    }
    std::vector<at::Tensor> parameters;
    for (const at::Tensor& parameter : outer->parameters()) parameters.push_back(parameter.clone());
    return parameters;
  }

  std::string root_;
  std::string job_dir_;
  v1::Job job_;
  base::ManualClock clock_;
  RunnerParameters parameters_;
  std::unique_ptr<grpc::Server> parameter_server_;
  std::vector<std::unique_ptr<Worker>> workers_;  // outlive the registry, which holds their stubs
  std::unique_ptr<server::StateStore> store_;
  std::unique_ptr<server::WorkerRegistry> registry_;
  server::EventSignal signal_;
  server::WorkerLeases leases_;
  absl::Mutex events_mutex_;
  std::vector<v1::JobEvent> events_ ABSL_GUARDED_BY(events_mutex_);
  std::unique_ptr<JobRunner> runner_;
};

TEST_F(LocalStepsRunnerTest, OuterStepsOnTheWorkersAveragedPseudoGradientsFromTheirOwnInnerSteps) {
  Worker* a = AddWorker();
  Worker* b = AddWorker();
  ASSERT_TRUE(NewRunner().ok());
  runner_->Start();
  ASSERT_TRUE(runner_->AwaitTerminal(absl::Now() + kSafety));
  runner_->Stop();
  const v1::Job job = runner_->Snapshot();
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.state_reason();
  EXPECT_EQ(job.progress().rounds_completed(), kRounds);

  // Every round: both workers, one shard each, and every inner step taken.
  std::vector<int64_t> rounds;
  for (const v1::JobEvent& event : Events()) {
    if (!event.has_round_completed()) continue;
    const v1::RoundCompleted& done = event.round_completed();
    rounds.push_back(done.round());
    EXPECT_EQ(done.workers(), kWorkers) << done.round();
    EXPECT_EQ(done.shards(), kWorkers) << done.round();
    EXPECT_EQ(done.inner_steps(), kWorkers * kInnerSteps) << done.round();
    EXPECT_TRUE(done.late_workers().empty()) << done.round();
  }
  EXPECT_EQ(rounds, (std::vector<int64_t>{1, 2, 3}));
  // Each worker keeps its inner optimizer's state for the job (until the coordinator names the job
  // finished in a heartbeat).
  EXPECT_THAT(a->service->LocalStepsJobs(), ::testing::ElementsAre(kJobId));
  EXPECT_THAT(b->service->LocalStepsJobs(), ::testing::ElementsAre(kJobId));

  absl::StatusOr<std::vector<at::Tensor>> final_parameters = CheckpointParameters(kRounds);
  ASSERT_TRUE(final_parameters.ok()) << final_parameters.status();
  const std::vector<at::Tensor> expected = ReferenceParameters();
  const std::vector<at::Tensor> initial = Initial();
  ASSERT_EQ(final_parameters->size(), expected.size());
  bool changed = false;
  for (size_t i = 0; i < expected.size(); ++i) {
    // The workers' plans and summation order differ from the reference's only by float32 rounding,
    // carried through 3 × 2 inner AdamW steps and 3 outer steps: 1e-4 relative, 1e-5 absolute is
    // far above that, and far below what a wrong step changes (an inner optimizer that forgets its
    // state between rounds, or an outer step with the inner optimizer, moves tensors by 3e-2 to 6e-2).
    EXPECT_TRUE(at::allclose((*final_parameters)[i], expected[i], 1e-4, 1e-5))
        << "tensor " << i << ": max difference "
        << ((*final_parameters)[i] - expected[i]).abs().max().item<float>();
    changed = changed || !at::allclose((*final_parameters)[i], initial[i], 1e-4, 1e-5);
  }
  EXPECT_TRUE(changed);
}

}  // namespace
}  // namespace slimfit
