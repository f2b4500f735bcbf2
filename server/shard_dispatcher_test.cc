// ShardDispatcher in-process: a tiny model's round over in-process workers (TestWorkerService:
// real gRPC in-process channels, real engine gradients), on a real registry, planner and state
// store, with a manual clock. The round's sum is checked against the engine run here on the whole
// batch; scripted workers fail, vanish, hang past their deadline, lie and break the protocol.
#include "server/shard_dispatcher.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/test_util.h"
#include "performer/gradient_engine.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "server/test_worker_request.h"
#include "server/test_worker_service.h"

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;
using Behaviour = TestWorkerService::Behaviour;

constexpr char kJobId[] = "job-000001";
constexpr int64_t kLength = 16;
constexpr uint64_t kSeed = 5;

performer::ModelConfig TinyConfig() {
  performer::ModelConfig config;
  config.vocab = 64;
  config.d_model = 16;
  config.layers = 1;
  config.heads = 2;
  config.d_ff = 32;
  return config;
}

class ShardDispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    const std::string path = testing_util::TempPath(absl::StrCat("shard_dispatcher_", name, ".db"));
    std::filesystem::remove(path);
    store_ = *StateStore::Open(path);
    model_ = std::make_shared<const performer::PerformerModel>(
        *performer::PerformerModel::Create(TinyConfig(), performer::DType::kFloat32, at::kCPU, /*seed=*/3));
    RegistryOptions registry_options;
    registry_options.lost_after = absl::Seconds(10);
    registry_options.clock = &clock_;
    registry_options.stub_factory = fleet_.StubFactory();
    registry_ = *WorkerRegistry::Create(store_.get(), registry_options);

    v1::Job job;
    job.set_job_id(kJobId);
    job.set_state(v1::JOB_STATE_RUNNING);
    ASSERT_TRUE(store_->PutJob(job).ok());
    record_ = std::make_unique<JobRecord>(job, 1, store_.get(), [this](const v1::JobEvent& event) {
      absl::MutexLock lock(&events_mutex_);
      events_.push_back(event);
    });
    rpc::TokenStream stream;
    for (int i = 0; i < 1024; ++i) stream.tokens.push_back((i * 7 + i / 13) % 61);
    stream.doc_starts = {0, 100, 350, 700};
    data_ = std::make_unique<JobData>(*JobData::Create(std::move(stream), TinyConfig().vocab, kLength,
                                                       /*tokens_per_round=*/8 * kLength, 0, 1));
    WorkerPlanner::Deps planner_deps;
    planner_deps.record = record_.get();
    planner_deps.registry = registry_.get();
    planner_deps.signal = &signal_;
    planner_deps.data = data_.get();
    planner_deps.config = TinyConfig();
    planner_deps.stopping = &stopping_;
    planner_ = std::make_unique<WorkerPlanner>(planner_deps);

    deps_.record = record_.get();
    deps_.store = store_.get();
    deps_.registry = registry_.get();
    deps_.leases = &leases_;
    deps_.signal = &signal_;
    deps_.planner = planner_.get();
    deps_.data = data_.get();
    deps_.options.shard_timeout = absl::Seconds(60);
    deps_.options.max_attempts = 3;
    deps_.names = model_->names();
    for (const at::Tensor& parameter : model_->parameters()) deps_.shapes.push_back(parameter.sizes().vec());
    deps_.encoding = v1::TOKEN_ENCODING_UINT8;
    deps_.feature_seed = kSeed;
    deps_.quarantine_after = 1;
    deps_.stopping = &stopping_;
    deps_.clock = &clock_;
  }

  // A worker serving the test model at version 1, registered (live); ids_[name] is its id.
  TestWorkerService* AddWorker(const std::string& name) {
    const std::string address = absl::StrCat("127.0.0.1:", 50001 + ids_.size());
    TestWorkerService* service =
        fleet_.Add(address,
                   [model = model_](const std::string& job, uint64_t version)
                       -> absl::StatusOr<std::shared_ptr<const performer::PerformerModel>> {
                     if (job != kJobId || version != 1) return absl::NotFoundError("no such version");
                     return model;
                   });
    v1::RegisterWorkerRequest request = TestWorkerRequest();
    request.set_advertise_address(address);
    absl::StatusOr<v1::RegisterWorkerResponse> registered = registry_->Register(request, std::nullopt);
    EXPECT_TRUE(registered.ok()) << registered.status();
    ids_[name] = registered.ok() ? registered->worker_id() : "";
    return service;
  }

  absl::StatusOr<RoundOutput> RunRound() {
    dispatcher_ = std::make_unique<ShardDispatcher>(deps_);
    return dispatcher_->Run(/*round=*/1, /*version=*/1, data_->RoundSequences(1), /*evaluate_only=*/false);
  }

  // The engine on the whole batch here: what the round's sum must be.
  std::vector<at::Tensor> ExpectedGradient() const {
    const std::vector<SequenceRef> sequences = data_->RoundSequences(1);
    performer::GradientOptions options;
    options.loss_normalizer = data_->PredictedTokens(sequences);
    options.feature_seed = kSeed;
    std::vector<at::Tensor> sum;
    for (const SequenceRef& sequence : sequences) {
      performer::PackedBatch batch;
      data_->Gather({sequence}, &batch.tokens, &batch.doc_starts);
      if (performer::PredictedTokenCount(batch) == 0) continue;
      absl::StatusOr<performer::GradientResult> result =
          performer::ComputeGradient(*model_, batch, performer::Plan(), options);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return sum;
      if (sum.empty()) {
        sum = result->gradients;
      } else {
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = sum[i] + result->gradients[i];
      }
    }
    return sum;
  }

  void ExpectExactSum(const RoundOutput& output) const {
    const std::vector<at::Tensor> expected = ExpectedGradient();
    ASSERT_EQ(output.gradient.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(at::allclose(output.gradient[i], expected[i], 1e-4, 1e-6)) << deps_.names[i];
    }
    EXPECT_EQ(output.tokens, data_->PredictedTokens(data_->RoundSequences(1)));
  }

  std::vector<v1::JobEvent> Events() {
    absl::MutexLock lock(&events_mutex_);
    return events_;
  }
  std::vector<v1::ShardReassigned> Reassignments() {
    std::vector<v1::ShardReassigned> moved;
    for (const v1::JobEvent& event : Events()) {
      if (event.has_shard_reassigned()) moved.push_back(event.shard_reassigned());
    }
    return moved;
  }

  base::ManualClock clock_;
  TestWorkerFleet fleet_;  // outlives the registry, which holds its stubs
  std::unique_ptr<StateStore> store_;
  std::shared_ptr<const performer::PerformerModel> model_;
  std::unique_ptr<WorkerRegistry> registry_;
  EventSignal signal_;
  WorkerLeases leases_;
  std::atomic<bool> stopping_{false};
  absl::Mutex events_mutex_;
  std::vector<v1::JobEvent> events_ ABSL_GUARDED_BY(events_mutex_);
  std::unique_ptr<JobRecord> record_;
  std::unique_ptr<JobData> data_;
  std::unique_ptr<WorkerPlanner> planner_;
  ShardDispatcher::Deps deps_;
  std::unique_ptr<ShardDispatcher> dispatcher_;
  std::map<std::string, std::string> ids_;  // AddWorker's name → worker id
};

TEST_F(ShardDispatcherTest, ShardsOnTwoWorkersSumToTheGradientOfTheWholeBatch) {
  TestWorkerService* a = AddWorker("a");
  TestWorkerService* b = AddWorker("b");
  absl::StatusOr<RoundOutput> output = RunRound();
  ASSERT_TRUE(output.ok()) << output.status();
  ExpectExactSum(*output);
  EXPECT_EQ(output->workers, 2);
  EXPECT_GT(a->calls(), 0);
  EXPECT_GT(b->calls(), 0);
  EXPECT_EQ(output->reassigned, 0);
  EXPECT_TRUE(Reassignments().empty());
}

// UNAVAILABLE (busy, draining) says nothing about the shard: it goes to the other worker, and the
// sum is still exact.
TEST_F(ShardDispatcherTest, AnUnavailableWorkersShardsGoToAnother) {
  AddWorker("a")->SetBehaviour(Behaviour::kUnavailable);
  AddWorker("b");
  absl::StatusOr<RoundOutput> output = RunRound();
  ASSERT_TRUE(output.ok()) << output.status();
  ExpectExactSum(*output);
  EXPECT_EQ(output->workers, 1);
  const std::vector<v1::ShardReassigned> moved = Reassignments();
  ASSERT_FALSE(moved.empty());
  EXPECT_EQ(moved[0].from_worker_id(), ids_["a"]);
  EXPECT_THAT(moved[0].reason(), HasSubstr("busy"));
  EXPECT_EQ(moved[0].next_attempt(), 2);
}

// Other failures count against max_attempts: a shard that fails everywhere fails the round.
TEST_F(ShardDispatcherTest, AShardFailingMaxAttemptsTimesFailsTheRound) {
  AddWorker("a")->SetBehaviour(Behaviour::kFails);
  absl::StatusOr<RoundOutput> output = RunRound();
  EXPECT_EQ(output.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(output.status().message(), HasSubstr("failed 3 times"));
}

// A worker that stops heartbeating while it holds a shard: its call is cancelled once the registry
// finds it LOST (lost_after on the clock, not the shard's deadline), and the shard is computed by
// the other worker.
TEST_F(ShardDispatcherTest, ALostWorkersShardIsReassigned) {
  TestWorkerService* a = AddWorker("a");
  a->SetBehaviour(Behaviour::kHangs);
  AddWorker("b");
  absl::StatusOr<RoundOutput> output;
  std::thread round([&] { output = RunRound(); });
  ASSERT_TRUE(a->AwaitCalls(1));
  clock_.Advance(absl::Seconds(11));
  v1::HeartbeatRequest heartbeat;  // b is alive
  heartbeat.set_worker_id(ids_["b"]);
  heartbeat.set_incarnation(1);
  heartbeat.set_state(v1::WORKER_STATE_BUSY);
  ASSERT_TRUE(registry_->Heartbeat(heartbeat).ok());
  EXPECT_EQ(registry_->ExpireSilentWorkers(), std::vector<std::string>{ids_["a"]});
  signal_.Notify();
  round.join();
  ASSERT_TRUE(output.ok()) << output.status();
  ExpectExactSum(*output);
  const std::vector<v1::ShardReassigned> moved = Reassignments();
  ASSERT_FALSE(moved.empty());
  EXPECT_EQ(moved[0].from_worker_id(), ids_["a"]);
  EXPECT_THAT(moved[0].reason(), HasSubstr("stopped heartbeating"));
}

// A worker that never answers: when the shard's deadline passes on the clock, the call is cancelled
// (DEADLINE_EXCEEDED) and the shard goes to another worker. Before the deadline nothing moves.
TEST_F(ShardDispatcherTest, AShardPastItsDeadlineIsCancelledAndReassigned) {
  TestWorkerService* a = AddWorker("a");
  a->SetBehaviour(Behaviour::kHangs, /*calls=*/1);
  TestWorkerService* b = AddWorker("b");
  absl::StatusOr<RoundOutput> output;
  std::thread round([&] { output = RunRound(); });
  ASSERT_TRUE(a->AwaitCalls(1));
  clock_.Advance(absl::Seconds(59));  // the deadline is shard_timeout (60 s) + 10 × the prediction
  EXPECT_EQ(a->finished(), 0);
  clock_.Advance(absl::Hours(1));
  signal_.Notify();
  round.join();
  ASSERT_TRUE(output.ok()) << output.status();
  ExpectExactSum(*output);
  EXPECT_GT(b->calls(), 0);
  bool deadline = false;
  for (const v1::ShardReassigned& moved : Reassignments()) {
    if (moved.from_worker_id() == ids_["a"] &&
        moved.reason().find("did not answer within") != std::string::npos)
      deadline = true;
  }
  EXPECT_TRUE(deadline);
}

// A spot check on every shard: the worker whose gradients disagree with two others is outvoted,
// quarantined, and the round is computed again without it; the sum is exact.
TEST_F(ShardDispatcherTest, ASpotCheckCatchesALyingWorker) {
  AddWorker("a");
  AddWorker("b");
  AddWorker("liar")->SetBehaviour(Behaviour::kLies);
  deps_.verify_fraction = 1.0;
  absl::StatusOr<RoundOutput> output = RunRound();
  ASSERT_TRUE(output.ok()) << output.status();
  ExpectExactSum(*output);
  EXPECT_TRUE(planner_->IsQuarantined(ids_["liar"]));
  EXPECT_FALSE(planner_->IsQuarantined(ids_["a"]));
  bool quarantined = false, disagreed = false;
  for (const v1::JobEvent& event : Events()) {
    if (event.has_worker_quarantined() && event.worker_quarantined().worker_id() == ids_["liar"])
      quarantined = true;
    if (event.has_shard_verified() && !event.shard_verified().agreed() &&
        event.shard_verified().odd_worker_id() == ids_["liar"])
      disagreed = true;
  }
  EXPECT_TRUE(quarantined);
  EXPECT_TRUE(disagreed);
}

// A result that breaks the protocol is a strike; at quarantine_after (1 here) the worker is
// quarantined and its shards go to the other.
TEST_F(ShardDispatcherTest, AWorkerBreakingTheProtocolIsQuarantined) {
  AddWorker("a")->SetBehaviour(Behaviour::kMalformed);
  AddWorker("b");
  absl::StatusOr<RoundOutput> output = RunRound();
  ASSERT_TRUE(output.ok()) << output.status();
  ExpectExactSum(*output);
  EXPECT_TRUE(planner_->IsQuarantined(ids_["a"]));
  const std::optional<v1::WorkerInfo> info = registry_->Info(ids_["a"]);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->quarantines_size(), 1);
}

// With room for less than one shard's gradient, shards are assembled one at a time (a shard
// alone always gets room): the round still completes exactly.
TEST_F(ShardDispatcherTest, TheAssemblyLimitSerializesShardsButTheRoundCompletes) {
  AddWorker("a");
  AddWorker("b");
  deps_.options.max_assembly_bytes = 1;
  deps_.options.max_sequences_per_shard = 1;
  absl::StatusOr<RoundOutput> output = RunRound();
  ASSERT_TRUE(output.ok()) << output.status();
  ExpectExactSum(*output);
  EXPECT_GE(output->shards, 8);
}

}  // namespace
}  // namespace slimfit::server
