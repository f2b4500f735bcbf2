#include "server/worker_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/test_util.h"
#include "data_formats/dataset_format.h"
#include "planner/plan_request_builder.h"
#include "server/test_worker_request.h"

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;

v1::RegisterWorkerRequest Worker(int64_t budget_bytes) { return TestWorkerRequest(budget_bytes); }

// A RUNNING job of a 2-layer d_model 64 model (float32) whose parameters and gradients alone need
// more than a 1 MiB worker has, on a registry with real workers.
class WorkerPlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *StateStore::Open(testing_util::TempPath(
        absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db")));
    RegistryOptions options;
    options.heartbeat_interval = absl::Seconds(10);
    options.lost_after = absl::Seconds(60);
    registry_ = *WorkerRegistry::Create(store_.get(), options);
    v1::Job job;
    job.set_job_id("job-000001");
    job.set_state(v1::JOB_STATE_RUNNING);
    ASSERT_TRUE(store_->PutJob(job).ok());
    record_ = std::make_unique<JobRecord>(job, 1, store_.get());
    rpc::TokenStream stream;
    for (int i = 0; i < 4096; ++i) stream.tokens.push_back(i % 251);
    stream.doc_starts = {0};
    data_ = std::make_unique<JobData>(*JobData::Create(std::move(stream), 256, 256, 512, 0, 1));
    WorkerPlanner::Deps& deps = deps_;
    deps.record = record_.get();
    deps.registry = registry_.get();
    deps.signal = &signal_;
    deps.data = data_.get();
    deps.config.vocab = 256;
    deps.config.d_model = 64;
    deps.config.layers = 2;
    deps.config.heads = 4;
    deps.config.d_ff = 256;
    deps.stopping = &stopping_;
    planner_ = std::make_unique<WorkerPlanner>(deps);
  }

  std::unique_ptr<StateStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  EventSignal signal_;
  std::unique_ptr<JobRecord> record_;
  std::unique_ptr<JobData> data_;
  std::atomic<bool> stopping_{false};
  WorkerPlanner::Deps deps_;
  std::unique_ptr<WorkerPlanner> planner_;
};

// Found by scripts/chaos.sh: after a coordinator restart the first worker to register again was
// one the model does not fit, and the job failed although the workers that ran it were about to
// come back.
TEST_F(WorkerPlannerTest, ARunningJobWaitsWhileOnlyWorkersThatCannotRunItAreLive) {
  ASSERT_TRUE(registry_->Register(Worker(1 << 20), std::nullopt).ok());
  absl::StatusOr<std::vector<WorkerPlan>> plans;
  std::thread runner([&] { plans = planner_->PlanWorkers(7); });
  // The job waits, saying why, and stays RUNNING.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (record_->Snapshot().state_reason().find("no live worker can run the job") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const v1::Job waiting = record_->Snapshot();
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(waiting.state_reason(), HasSubstr("waiting for 1 eligible worker (0 live)"));
  EXPECT_THAT(waiting.state_reason(), HasSubstr("parameters and gradients alone need"));

  // A worker that fits comes (back): the job goes on with it alone.
  absl::StatusOr<v1::RegisterWorkerResponse> fits =
      registry_->Register(Worker(int64_t{256} << 20), std::nullopt);
  ASSERT_TRUE(fits.ok()) << fits.status();
  signal_.Notify();
  runner.join();
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->size(), 1u);
  EXPECT_EQ((*plans)[0].worker.worker_id, fits->worker_id());
  EXPECT_EQ(record_->Snapshot().state(), v1::JOB_STATE_RUNNING);
}

TEST_F(WorkerPlannerTest, ARoundOverWorkerLocalDataWaitsForALiveHolder) {
  // The job's data: the uploaded stream and one worker-local dataset, "notes".
  LocalSource notes;
  notes.sha256 = std::string(64, 'e');
  notes.name = "notes";
  notes.documents = {1, 2, 1, 1};
  rpc::TokenStream stream;
  for (int i = 0; i < 4096; ++i) stream.tokens.push_back(i % 251);
  stream.doc_starts = {0};
  *data_ = *JobData::Create(std::move(stream), {notes}, 256, 256, 512, 0, 1);
  ASSERT_TRUE(registry_->Register(Worker(int64_t{256} << 20), std::nullopt).ok());

  absl::StatusOr<std::vector<WorkerPlan>> plans;
  std::thread runner([&] { plans = planner_->PlanWorkers(3, {1}); });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (record_->Snapshot().state_reason().find("holding local dataset") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(
      record_->Snapshot().state_reason(),
      HasSubstr("waiting for a live eligible worker holding local dataset notes (SHA-256 eeeeeeeeeeee…)"));

  // A holder registers: the round goes on with both workers.
  v1::RegisterWorkerRequest holder = Worker(int64_t{256} << 20);
  v1::LocalDataset* announced = holder.add_local_datasets();
  announced->set_name("notes");
  announced->set_sha256(notes.sha256);
  announced->set_tokens(1024);
  announced->set_documents(5);
  announced->set_content_type("text/plain");
  announced->set_max_token(200);
  absl::StatusOr<v1::RegisterWorkerResponse> registered = registry_->Register(holder, std::nullopt);
  ASSERT_TRUE(registered.ok()) << registered.status();
  signal_.Notify();
  runner.join();
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->size(), 2u);
  int holders = 0;
  for (const WorkerPlan& plan : *plans) holders += plan.worker.local_datasets.count(notes.sha256) > 0 ? 1 : 0;
  EXPECT_EQ(holders, 1);
}

TEST_F(WorkerPlannerTest, IdenticalDevicesShareASearchAndEveryBudgetGetsItsOwn) {
  std::vector<std::string> ids;
  for (int64_t budget : {int64_t{64} << 20, int64_t{64} << 20, int64_t{3} << 20}) {
    absl::StatusOr<v1::RegisterWorkerResponse> worker = registry_->Register(Worker(budget), std::nullopt);
    ASSERT_TRUE(worker.ok()) << worker.status();
    ids.push_back(worker->worker_id());
  }
  absl::StatusOr<std::vector<WorkerPlan>> plans = planner_->PlanWorkers(1);
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->size(), 3u);
  std::map<std::string, WorkerPlan> by_id;
  for (const WorkerPlan& plan : *plans) by_id.emplace(plan.worker.worker_id, plan);
  const planner::PlanCandidate& first = by_id.at(ids[0]).candidate;
  const planner::PlanCandidate& twin = by_id.at(ids[1]).candidate;
  const planner::PlanCandidate& small = by_id.at(ids[2]).candidate;
  EXPECT_EQ(twin.plan.DebugString(), first.plan.DebugString());
  EXPECT_EQ(twin.prediction.peak_bytes, first.prediction.peak_bytes);
  EXPECT_LT(small.prediction.peak_bytes, first.prediction.peak_bytes);
  EXPECT_LE(small.prediction.peak_bytes, int64_t{3} << 20);
}

// A local-steps job: each worker holds its inner optimizer beside the plan's peak.
TEST_F(WorkerPlannerTest, ReservedBytesComeOffTheBudgetAndCountInTheReplanCheck) {
  const int64_t budget = int64_t{6} << 20, reserved = int64_t{1} << 20;
  ASSERT_TRUE(registry_->Register(Worker(budget), std::nullopt).ok());
  absl::StatusOr<std::vector<WorkerPlan>> without = planner_->PlanWorkers(1);
  ASSERT_TRUE(without.ok()) << without.status();
  WorkerPlanner::Deps deps = deps_;
  deps.reserved_bytes = reserved;
  WorkerPlanner planner(deps);
  absl::StatusOr<std::vector<WorkerPlan>> with = planner.PlanWorkers(1);
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_EQ(with->size(), 1u);
  const WorkerPlan plan = (*with)[0];
  // The worker checks peak + reserved against floor(budget · 0.9): the plan leaves that room.
  EXPECT_LE(plan.candidate.prediction.peak_bytes + reserved, budget * 9 / 10);
  EXPECT_LT(plan.candidate.prediction.peak_bytes, (*without)[0].candidate.prediction.peak_bytes);

  // A worker measuring exactly what was predicted, its reserve included, keeps its plan; one
  // measuring half as much again is planned again within a smaller budget.
  planner.MaybeReplan(plan, plan.candidate.prediction.peak_bytes + reserved, 2);
  absl::StatusOr<std::vector<WorkerPlan>> kept = planner.PlanWorkers(2);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ((*kept)[0].candidate.prediction.peak_bytes, plan.candidate.prediction.peak_bytes);
  planner.MaybeReplan(plan, 3 * (plan.candidate.prediction.peak_bytes + reserved) / 2, 3);
  absl::StatusOr<std::vector<WorkerPlan>> replanned = planner.PlanWorkers(3);
  ASSERT_TRUE(replanned.ok()) << replanned.status();
  EXPECT_LT((*replanned)[0].candidate.prediction.peak_bytes, plan.candidate.prediction.peak_bytes);
}

// The worker planner plans what GetMemoryPlan searches for the same job (planner::
// JobPlanSearchRequest), --max_sequences_per_shard included: GetMemoryPlan once ignored it and
// counted a running gradient sum that one-sequence shards never keep.
TEST_F(WorkerPlannerTest, PlansWhatGetMemoryPlanSearchesForTheSameJob) {
  const int64_t budget = int64_t{64} << 20;
  ASSERT_TRUE(registry_->Register(Worker(budget), std::nullopt).ok());
  v1::JobSpec spec;  // the fixture's data: L = 256, two sequences a round
  spec.set_sequence_length(256);
  spec.set_tokens_per_round(512);
  std::map<int64_t, int64_t> gradient_bytes;  // by --max_sequences_per_shard
  for (const int64_t cap : {0, 1}) {
    WorkerPlanner::Deps deps = deps_;
    deps.options.max_sequences_per_shard = cap;
    WorkerPlanner planner(deps);
    absl::StatusOr<std::vector<WorkerPlan>> plans = planner.PlanWorkers(1);
    ASSERT_TRUE(plans.ok()) << plans.status();
    ASSERT_EQ(plans->size(), 1u);
    absl::StatusOr<planner::PlanSearchRequest> search = planner::JobPlanSearchRequest(
        spec, deps.config, data_->max_documents_per_sequence(), cap, deps.options.safety_margin);
    ASSERT_TRUE(search.ok()) << search.status();
    search->memory_budget_bytes = budget;
    absl::StatusOr<planner::PlanSearchResult> searched =
        planner::SearchPlans(*search, (*plans)[0].worker.profile);
    ASSERT_TRUE(searched.ok()) << searched.status();
    const planner::PlanCandidate& planned = (*plans)[0].candidate;
    EXPECT_EQ(planned.plan.DebugString(), searched->chosen.plan.DebugString()) << cap;
    EXPECT_EQ(planned.prediction.peak_bytes, searched->chosen.prediction.peak_bytes) << cap;
    gradient_bytes[cap] = planned.prediction.gradient_bytes;
  }
  EXPECT_LT(gradient_bytes[1], gradient_bytes[0]);  // one-sequence shards keep no running sum
}

TEST(PlanSearchBudgetTest, LeavesThePlanRoomForTheReserveUnderTheWorkersOwnCheck) {
  EXPECT_EQ(PlanSearchBudget(1000000, 0, 0.1), 1000000);  // synchronous jobs: the budget as is
  for (int64_t budget : {int64_t{3} << 20, int64_t{1} << 30, int64_t{123456789}}) {
    for (int64_t reserved : {int64_t{1}, int64_t{777777}, int64_t{1} << 20}) {
      const int64_t searched = PlanSearchBudget(budget, reserved, 0.1);
      // A plan that uses all of the searched budget's usable part still passes the worker's check.
      const int64_t usable_searched = static_cast<int64_t>(std::floor(static_cast<double>(searched) * 0.9));
      const int64_t usable_worker = static_cast<int64_t>(std::floor(static_cast<double>(budget) * 0.9));
      EXPECT_LE(usable_searched + reserved, usable_worker) << budget << " " << reserved;
      EXPECT_GE(usable_searched + reserved, usable_worker - 3) << budget << " " << reserved;  // not wasteful
    }
  }
  EXPECT_EQ(PlanSearchBudget(100, 1000, 0.1), 1);
}

TEST(ReservedBytesPerWorkerTest, LocalStepsReserveTheInnerOptimizer) {
  performer::ModelConfig config;
  config.vocab = 256;
  config.d_model = 64;
  config.layers = 2;
  config.heads = 4;
  config.d_ff = 256;
  v1::JobSpec spec;
  spec.mutable_optimizer()->mutable_adamw();
  EXPECT_EQ(ReservedBytesPerWorker(spec, config), 0);
  spec.set_local_steps(10);
  EXPECT_EQ(ReservedBytesPerWorker(spec, config), 4 * 4 * config.parameter_count());  // float32, AdamW
  spec.set_dtype(v1::DTYPE_FLOAT64);
  spec.mutable_optimizer()->mutable_sgd();
  EXPECT_EQ(ReservedBytesPerWorker(spec, config), 2 * 8 * config.parameter_count());  // plain SGD
}

TEST(ReservedBytesPerWorkerTest, CompressedPseudoGradientsReserveTheirErrorFeedback) {
  performer::ModelConfig config;
  config.vocab = 256;
  config.d_model = 64;
  config.layers = 2;
  config.heads = 4;
  config.d_ff = 256;
  const int64_t parameters = config.parameter_count();
  v1::JobSpec spec;
  spec.mutable_optimizer()->mutable_adamw();
  spec.set_local_steps(10);
  spec.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_NONE);
  EXPECT_EQ(ReservedBytesPerWorker(spec, config), 4 * 4 * parameters);
  // Compressed pseudo-gradients: 1.5 × the parameter bytes more (float32: 6 bytes a parameter).
  spec.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_INT8);
  EXPECT_EQ(ReservedBytesPerWorker(spec, config), 4 * 4 * parameters + 6 * parameters);
  spec.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_FLOAT16);
  EXPECT_EQ(ReservedBytesPerWorker(spec, config), 4 * 4 * parameters + 6 * parameters);
  // Compressed parameter broadcasts cost a worker nothing extra here.
  spec.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_NONE);
  spec.mutable_compression()->set_parameters(v1::COMPRESSION_INT8);
  EXPECT_EQ(ReservedBytesPerWorker(spec, config), 4 * 4 * parameters);
  // float64 plain SGD: 12 bytes a parameter more.
  spec.set_dtype(v1::DTYPE_FLOAT64);
  spec.mutable_optimizer()->mutable_sgd();
  spec.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_INT8);
  EXPECT_EQ(ReservedBytesPerWorker(spec, config), 2 * 8 * parameters + 12 * parameters);
  // Without local steps nothing is reserved, whatever the compression says.
  spec.clear_local_steps();
  EXPECT_EQ(ReservedBytesPerWorker(spec, config), 0);
}

TEST_F(WorkerPlannerTest, AWaitingJobStopsWhenItsRunnerStops) {
  ASSERT_TRUE(registry_->Register(Worker(1 << 20), std::nullopt).ok());
  absl::StatusOr<std::vector<WorkerPlan>> plans;
  std::thread runner([&] { plans = planner_->PlanWorkers(1); });
  absl::SleepFor(absl::Milliseconds(100));
  stopping_ = true;
  signal_.Notify();
  runner.join();
  EXPECT_EQ(plans.status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace slimfit::server
