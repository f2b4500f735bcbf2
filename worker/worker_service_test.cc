// WorkerService over real gRPC on loopback, with the TestCoordinator serving parameters. The
// gradient it streams is checked against performer::ComputeGradient run here on the same
// sequences.
#include "worker/worker_service.h"

#include <ATen/ATen.h>

#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "performer/gradient_engine.h"
#include "planner/device_profile_io.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "wire/tensor_chunks.h"
#include "worker/test_coordinator.h"

namespace slimfit::worker {
namespace {

using ::testing::HasSubstr;

constexpr char kJoinToken[] = "worker-secret";
// What the coordinator presents to this worker's incarnation.
constexpr char kToken[] = "ct-test";
constexpr char kJob[] = "job-000001";
constexpr int64_t kLength = 16;

performer::ModelConfig TinyConfig() {
  performer::ModelConfig config;
  config.vocab = 64;
  config.d_model = 32;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 48;
  return config;
}

// 50 tokens: sequences of 16, 16, 16 and 2 tokens; documents start at 0, 5, 20, 33 and 40.
std::vector<int64_t> ShardTokens() {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 50; ++i) tokens.push_back((i * 7 + 3 * (i / 5)) % 64);
  return tokens;
}
const std::vector<int64_t> kDocStarts = {0, 5, 20, 33, 40};

performer::Plan FullPlan() { return performer::Plan(); }

performer::Plan SlicedPlan(int64_t slice) {
  performer::Plan plan;
  plan.slice = slice;
  plan.block = 4;
  return plan;
}

v1::ComputeGradientRequest MakeRequest(const performer::Plan& plan, int64_t normalizer = 1000,
                                       const std::vector<int64_t>& doc_starts = kDocStarts) {
  v1::ComputeGradientRequest request;
  request.set_job_id(kJob);
  request.set_round(1);
  request.set_shard_id(0);
  request.set_attempt(1);
  request.set_parameter_version(2);
  *request.mutable_plan() = planner::PlanToProto(plan);
  request.set_sequence_length(kLength);
  request.set_token_encoding(v1::TOKEN_ENCODING_UINT8);
  std::string bytes;
  for (int64_t t : ShardTokens()) bytes.push_back(static_cast<char>(t));
  request.set_tokens(bytes);
  for (int64_t s : doc_starts) request.add_doc_starts(s);
  request.set_loss_normalizer(normalizer);
  request.set_feature_seed(5);
  return request;
}

// performer::ComputeGradient on each sequence of the shard, summed: what the worker must return.
// A sequence that predicts nothing (every document in it one token long) adds nothing.
struct Expected {
  std::vector<at::Tensor> gradient;
  double loss_sum = 0;
  int64_t token_count = 0;
};
Expected DirectGradient(const performer::PerformerModel& model, int64_t normalizer,
                        const std::vector<int64_t>& doc_starts = kDocStarts) {
  const std::vector<int64_t> tokens = ShardTokens();
  Expected expected;
  for (int64_t begin = 0; begin < static_cast<int64_t>(tokens.size()); begin += kLength) {
    const int64_t end = std::min<int64_t>(tokens.size(), begin + kLength);
    performer::PackedBatch batch;
    batch.tokens.assign(tokens.begin() + begin, tokens.begin() + end);
    batch.doc_starts.push_back(0);
    for (int64_t s : doc_starts) {
      if (s > begin && s < end) batch.doc_starts.push_back(s - begin);
    }
    if (performer::PredictedTokenCount(batch) == 0) continue;
    performer::GradientOptions options;
    options.loss_normalizer = normalizer;
    options.feature_seed = 5;
    absl::StatusOr<performer::GradientResult> result =
        performer::ComputeGradient(model, batch, FullPlan(), options);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return expected;
    if (expected.gradient.empty()) {
      expected.gradient = result->gradients;
    } else {
      for (size_t i = 0; i < expected.gradient.size(); ++i) expected.gradient[i] += result->gradients[i];
    }
    expected.loss_sum += result->loss_sum;
    expected.token_count += result->token_count;
  }
  return expected;
}

struct CallResult {
  grpc::Status status;
  std::optional<v1::ErrorDetail> detail;
  std::vector<v1::TensorChunk> chunks;
  std::optional<v1::GradientSummary> summary;
  int messages_after_summary = 0;
};

class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_server_ = TestCoordinatorServer::Start(&coordinator_);
    ASSERT_NE(coordinator_server_, nullptr);
    absl::StatusOr<performer::PerformerModel> model =
        performer::PerformerModel::Create(TinyConfig(), performer::DType::kFloat32, at::kCPU, /*seed=*/3);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::make_unique<performer::PerformerModel>(*std::move(model));
    coordinator_.Publish(kJob, 2, *model_, 5);
    absl::StatusOr<planner::DeviceProfile> profile =
        planner::ReadDeviceProfile(testing_util::RunfilePath("client/testdata/tiny_cpu.profile"));
    ASSERT_TRUE(profile.ok()) << profile.status();
    profile_ = *profile;
    StartWorker(256 << 20);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  void StartWorker(int64_t budget) {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    identity_ = std::make_unique<WorkerIdentity>(kJoinToken, coordinator_.AddWorker());
    identity_->SetCoordinatorToken(kToken);
    ParameterCache::Options cache_options;
    cache_options.coordinator = v1::Coordinator::NewStub(rpc::MakeChannel(coordinator_server_->address()));
    cache_options.identity = identity_.get();
    cache_ = std::make_unique<ParameterCache>(cache_options);
    WorkerService::Options options;
    options.identity = identity_.get();
    options.profile = profile_;
    options.calibrated_at = absl::FromUnixSeconds(1700000000);
    options.memory_budget_bytes = budget;
    options.threads = 1;
    options.cache = cache_.get();
    service_ = std::make_unique<WorkerService>(options);
    service_->SetWorkerId("w-0007");
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Worker::NewStub(rpc::MakeChannel(absl::StrCat("127.0.0.1:", port)));
  }

  CallResult Call(const v1::ComputeGradientRequest& request, const std::string& token = kToken,
                  std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    CallResult result;
    std::unique_ptr<grpc::ClientContext> context = rpc::MakeClientContext(token, timeout);
    auto reader = stub_->ComputeGradient(context.get(), request);
    v1::ComputeGradientResponse response;
    while (reader->Read(&response)) {
      if (result.summary.has_value()) ++result.messages_after_summary;
      if (response.has_chunk()) result.chunks.push_back(response.chunk());
      if (response.has_summary()) result.summary = response.summary();
    }
    result.status = reader->Finish();
    result.detail = rpc::ErrorDetailOf(rpc::FromGrpcStatus(result.status, "ComputeGradient", context.get()));
    return result;
  }

  // The streamed gradient reassembled, checked against the model's names and shapes.
  std::vector<at::Tensor> Reassemble(const CallResult& call,
                                     performer::DType dtype = performer::DType::kFloat32) {
    std::vector<performer::TensorSpec> specs;
    for (size_t i = 0; i < model_->names().size(); ++i) {
      const at::Tensor& p = model_->parameters()[i];
      specs.push_back({model_->names()[i], std::vector<int64_t>(p.sizes().begin(), p.sizes().end())});
    }
    performer::TensorAssembler assembler(specs, dtype, "gradient");
    for (const v1::TensorChunk& chunk : call.chunks) {
      absl::Status s = assembler.Add(chunk);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) return {};
    }
    absl::StatusOr<std::vector<at::Tensor>> tensors = assembler.Finish();
    EXPECT_TRUE(tensors.ok()) << tensors.status();
    return tensors.ok() ? *tensors : std::vector<at::Tensor>();
  }

  // Waits until the service reports a shard running.
  bool WaitUntilBusy() {
    for (int i = 0; i < 500; ++i) {
      if (service_->TakeHeartbeatState().current_work.has_value()) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  TestCoordinator coordinator_;
  std::unique_ptr<TestCoordinatorServer> coordinator_server_;
  std::unique_ptr<performer::PerformerModel> model_;
  planner::DeviceProfile profile_;
  std::unique_ptr<WorkerIdentity> identity_;
  std::unique_ptr<ParameterCache> cache_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

TEST_F(WorkerServiceTest, GradientEqualsTheEngineSummedOverSequences) {
  const CallResult call = Call(MakeRequest(FullPlan(), 1000));
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ASSERT_TRUE(call.summary.has_value());
  EXPECT_EQ(call.messages_after_summary, 0);
  const Expected expected = DirectGradient(*model_, 1000);
  const std::vector<at::Tensor> got = Reassemble(call);
  ASSERT_EQ(got.size(), expected.gradient.size());
  EXPECT_LT(performer::RelativeDiscrepancy(got, expected.gradient), 1e-5);

  const v1::GradientSummary& summary = *call.summary;
  EXPECT_EQ(summary.job_id(), kJob);
  EXPECT_EQ(summary.round(), 1);
  EXPECT_EQ(summary.shard_id(), 0);
  EXPECT_EQ(summary.attempt(), 1);
  EXPECT_EQ(summary.parameter_version(), 2u);
  EXPECT_EQ(summary.sequences(), 4);
  // 50 tokens, less the first of each sequence (4) and of each document start inside one (4).
  EXPECT_EQ(summary.token_count(), 42);
  EXPECT_EQ(summary.token_count(), expected.token_count);
  EXPECT_NEAR(summary.loss_sum(), expected.loss_sum, 1e-4 * expected.loss_sum);
  EXPECT_EQ(summary.gradient_tensors(), static_cast<int>(model_->names().size()));
  EXPECT_EQ(summary.gradient_bytes(), model_->parameter_bytes());
  EXPECT_GT(summary.measured_peak_bytes(), 0);
  EXPECT_GT(summary.predicted_peak_bytes(), 0);
  EXPECT_EQ(summary.slice_forwards(), 4);  // one per sequence for full back-propagation
  EXPECT_GT(summary.compute_seconds(), 0);
  EXPECT_GT(summary.fetch_seconds(), 0);   // this version was not cached: it was fetched
  EXPECT_GT(summary.stream_seconds(), 0);  // the gradient went out in chunks
  EXPECT_GE(summary.total_seconds(),
            summary.fetch_seconds() + summary.compute_seconds() + summary.stream_seconds() - 1e-6);
  EXPECT_EQ(coordinator_.FetchCount(kJob, 2), 1);

  // The heartbeat sees the peak once.
  EXPECT_EQ(service_->TakeHeartbeatState().measured_peak_bytes, summary.measured_peak_bytes());
  const WorkerService::HeartbeatState state = service_->TakeHeartbeatState();
  EXPECT_EQ(state.measured_peak_bytes, 0);
  EXPECT_EQ(state.state, v1::WORKER_STATE_IDLE);
  EXPECT_FALSE(state.current_work.has_value());
}

TEST_F(WorkerServiceTest, SequenceThatPredictsNothingAddsNothing) {
  // A document of one token at 49: the last sequence (48, 49) predicts nothing.
  const std::vector<int64_t> starts = {0, 5, 20, 33, 40, 49};
  for (const performer::Plan& plan : {FullPlan(), SlicedPlan(4)}) {
    const CallResult call = Call(MakeRequest(plan, 1000, starts));
    ASSERT_TRUE(call.status.ok()) << call.status.error_message();
    const Expected expected = DirectGradient(*model_, 1000, starts);
    EXPECT_LT(performer::RelativeDiscrepancy(Reassemble(call), expected.gradient), 1e-5);
    EXPECT_EQ(call.summary->token_count(), 41);
    EXPECT_EQ(call.summary->sequences(), 4);
  }
}

TEST_F(WorkerServiceTest, NormaliserScalesTheGradient) {
  const CallResult thousand = Call(MakeRequest(FullPlan(), 1000));
  const CallResult five_hundred = Call(MakeRequest(FullPlan(), 500));
  ASSERT_TRUE(thousand.status.ok() && five_hundred.status.ok());
  std::vector<at::Tensor> doubled = Reassemble(thousand);
  for (at::Tensor& t : doubled) t = t * 2;
  EXPECT_LT(performer::RelativeDiscrepancy(Reassemble(five_hundred), doubled), 1e-5);
  EXPECT_EQ(coordinator_.FetchCount(kJob, 2), 1);  // cached
}

TEST_F(WorkerServiceTest, SlicedPlansGiveTheFullGradient) {
  const CallResult full = Call(MakeRequest(FullPlan()));
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  const std::vector<at::Tensor> want = Reassemble(full);
  // C = 4 (the last, 2-token sequence clamps it), and C = L.
  for (int64_t slice : {4, 16}) {
    const CallResult sliced = Call(MakeRequest(SlicedPlan(slice)));
    ASSERT_TRUE(sliced.status.ok()) << sliced.status.error_message();
    EXPECT_LT(performer::RelativeDiscrepancy(Reassemble(sliced), want), 1e-5) << "C = " << slice;
    EXPECT_NEAR(sliced.summary->loss_sum(), full.summary->loss_sum(), 1e-4 * full.summary->loss_sum());
    if (slice < kLength) {
      EXPECT_GT(sliced.summary->slice_forwards(), full.summary->slice_forwards());
    }
  }
}

TEST_F(WorkerServiceTest, Float64PlanStreamsFloat64) {
  performer::Plan plan = SlicedPlan(8);
  plan.dtype = performer::DType::kFloat64;
  const CallResult call = Call(MakeRequest(plan));
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ASSERT_FALSE(call.chunks.empty());
  EXPECT_EQ(call.chunks[0].dtype(), v1::DTYPE_FLOAT64);
  EXPECT_LT(performer::RelativeDiscrepancy(Reassemble(call, performer::DType::kFloat64),
                                           DirectGradient(*model_, 1000).gradient),
            1e-5);
}

TEST_F(WorkerServiceTest, EvaluateOnlyStreamsTheSummaryAlone) {
  v1::ComputeGradientRequest request = MakeRequest(FullPlan());
  request.set_evaluate_only(true);
  const CallResult call = Call(request);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  EXPECT_TRUE(call.chunks.empty());
  ASSERT_TRUE(call.summary.has_value());
  EXPECT_EQ(call.summary->gradient_tensors(), 0);
  EXPECT_EQ(call.summary->gradient_bytes(), 0);
  const Expected expected = DirectGradient(*model_, 1000);
  EXPECT_NEAR(call.summary->loss_sum(), expected.loss_sum, 1e-4 * expected.loss_sum);
  EXPECT_EQ(call.summary->token_count(), expected.token_count);
}

TEST_F(WorkerServiceTest, OverBudgetPlanIsRefusedBeforeRunning) {
  StartWorker(64 << 10);  // 64 KiB: the parameters alone need more
  const CallResult call = Call(MakeRequest(FullPlan()));
  ASSERT_EQ(call.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << call.status.error_message();
  EXPECT_THAT(call.status.error_message(), HasSubstr("plan needs "));
  EXPECT_THAT(call.status.error_message(),
              HasSubstr("but worker w-0007 budget allows 57.6 KiB (64.0 KiB less a 10% margin)"));
  ASSERT_TRUE(call.detail.has_value());
  EXPECT_EQ(call.detail->budget_bytes(), 64 << 10);
  EXPECT_EQ(call.detail->usable_bytes(), 58982);
  EXPECT_GT(call.detail->required_bytes(), call.detail->usable_bytes());
  EXPECT_FALSE(call.summary.has_value());
  EXPECT_TRUE(call.chunks.empty());
  EXPECT_EQ(service_->TakeHeartbeatState().measured_peak_bytes, 0);  // nothing ran
}

TEST_F(WorkerServiceTest, OnlyTheCoordinatorComputesAndTheJoinTokenReadsTheProfile) {
  // The join token may ask for the profile, not for gradients.
  EXPECT_EQ(Call(MakeRequest(FullPlan()), kJoinToken).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto join_context = rpc::MakeClientContext(kJoinToken, std::chrono::seconds(10));
  v1::GetProfileResponse join_profile;
  EXPECT_TRUE(stub_->GetProfile(join_context.get(), v1::GetProfileRequest(), &join_profile).ok());
  // A new incarnation's token replaces the old one.
  identity_->SetCoordinatorToken("ct-next");
  EXPECT_EQ(Call(MakeRequest(FullPlan()), kToken).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  identity_->SetCoordinatorToken(kToken);
}

TEST_F(WorkerServiceTest, TokenIsRequiredOnEveryRpc) {
  for (const std::string& token : {std::string(), std::string("wrong"), std::string("wc-w-0001")}) {
    EXPECT_EQ(Call(MakeRequest(FullPlan()), token).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    auto context = rpc::MakeClientContext(token, std::chrono::seconds(10));
    v1::GetProfileResponse profile;
    EXPECT_EQ(stub_->GetProfile(context.get(), v1::GetProfileRequest(), &profile).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    context = rpc::MakeClientContext(token, std::chrono::seconds(10));
    v1::MemoryPlan plan;
    EXPECT_EQ(stub_->Plan(context.get(), v1::PlanRequest(), &plan).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(coordinator_.FetchCount(kJob, 2), 0);
}

TEST_F(WorkerServiceTest, BadRequestsNameTheField) {
  struct Case {
    std::string field;
    std::function<void(v1::ComputeGradientRequest*)> corrupt;
  };
  const std::vector<Case> cases = {
      {"tokens", [](auto* r) { (*r->mutable_tokens())[7] = static_cast<char>(64); }},  // = vocab
      {"doc_starts", [](auto* r) { r->set_doc_starts(2, 4); }},
      {"doc_starts", [](auto* r) { r->add_doc_starts(50); }},
      {"loss_normalizer", [](auto* r) { r->set_loss_normalizer(0); }},
      {"plan", [](auto* r) { r->mutable_plan()->set_slice(17); }},
      {"plan",
       [](auto* r) { r->mutable_plan()->set_recompute(v1::LAYER_RECOMPUTE_LAYERS); }},  // with slice 0
      {"round", [](auto* r) { r->set_round(0); }},
      {"sequence_length", [](auto* r) { r->set_sequence_length(1); }},
  };
  for (const Case& c : cases) {
    v1::ComputeGradientRequest request = MakeRequest(FullPlan());
    c.corrupt(&request);
    const CallResult call = Call(request);
    EXPECT_EQ(call.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_THAT(call.status.error_message(), HasSubstr(c.field));
    ASSERT_TRUE(call.detail.has_value()) << c.field;
    EXPECT_EQ(call.detail->field(), c.field);
  }
  EXPECT_EQ(service_->TakeHeartbeatState().state, v1::WORKER_STATE_IDLE);
}

TEST_F(WorkerServiceTest, StaleAndUnknownVersionsPassThrough) {
  coordinator_.Publish(kJob, 3, *model_, 5);
  const CallResult stale = Call(MakeRequest(FullPlan()));  // version 2
  ASSERT_EQ(stale.status.error_code(), grpc::StatusCode::ABORTED) << stale.status.error_message();
  EXPECT_THAT(stale.status.error_message(), HasSubstr("stale"));
  ASSERT_TRUE(stale.detail.has_value());
  EXPECT_EQ(stale.detail->current_parameter_version(), 3u);

  v1::ComputeGradientRequest unknown = MakeRequest(FullPlan());
  unknown.set_job_id("job-999");
  EXPECT_EQ(Call(unknown).status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(WorkerServiceTest, OneShardAtATime) {
  coordinator_.SetFetchDelay(absl::Milliseconds(1500));
  CallResult first;
  std::thread running([&] { first = Call(MakeRequest(FullPlan())); });
  ASSERT_TRUE(WaitUntilBusy());
  const WorkerService::HeartbeatState state = service_->TakeHeartbeatState();
  EXPECT_EQ(state.state, v1::WORKER_STATE_BUSY);
  ASSERT_TRUE(state.current_work.has_value());
  EXPECT_EQ(state.current_work->job_id(), kJob);
  EXPECT_EQ(state.current_work->tokens(), 50);

  v1::ComputeGradientRequest second = MakeRequest(FullPlan());
  second.set_shard_id(1);
  const CallResult busy = Call(second);
  EXPECT_EQ(busy.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(busy.status.error_message(), HasSubstr("busy with job job-000001 round 1 shard 0"));
  running.join();
  EXPECT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_TRUE(Call(second).status.ok());
}

TEST_F(WorkerServiceTest, DrainingRefusesNewShards) {
  service_->StartDraining();
  const CallResult call = Call(MakeRequest(FullPlan()));
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(call.status.error_message(), HasSubstr("draining"));
  EXPECT_EQ(service_->TakeHeartbeatState().state, v1::WORKER_STATE_DRAINING);
  EXPECT_TRUE(service_->WaitUntilIdle(absl::ZeroDuration()));
}

TEST_F(WorkerServiceTest, AbandonedShardEndsCancelledAndTheWorkerIsIdleAgain) {
  coordinator_.SetFetchDelay(absl::Milliseconds(800));
  CallResult call;
  std::thread running([&] { call = Call(MakeRequest(FullPlan())); });
  ASSERT_TRUE(WaitUntilBusy());
  service_->StartDraining();
  EXPECT_FALSE(service_->WaitUntilIdle(absl::Milliseconds(50)));
  service_->CancelCurrentShard();
  EXPECT_TRUE(service_->WaitUntilIdle(absl::Seconds(10)));
  running.join();
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_THAT(call.status.error_message(), HasSubstr("abandoned"));
  EXPECT_FALSE(call.summary.has_value());
}

TEST_F(WorkerServiceTest, CallerDeadlineDiscardsTheShard) {
  coordinator_.SetFetchDelay(absl::Milliseconds(600));
  const CallResult call = Call(MakeRequest(FullPlan()), kToken, std::chrono::milliseconds(200));
  // The parameter fetch ends by the same deadline: on a loaded machine the worker's UNAVAILABLE
  // ("the fetch ran out of time") can reach the caller just before its own timer fires.
  EXPECT_THAT(call.status.error_code(),
              ::testing::AnyOf(grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::UNAVAILABLE))
      << call.status.error_message();
  EXPECT_TRUE(service_->WaitUntilIdle(absl::Seconds(10)));
  EXPECT_EQ(service_->TakeHeartbeatState().measured_peak_bytes, 0);  // no sequence ran
}

TEST_F(WorkerServiceTest, GetProfileDescribesTheWorker) {
  auto context = rpc::MakeClientContext(kToken, std::chrono::seconds(10));
  v1::GetProfileResponse response;
  ASSERT_TRUE(stub_->GetProfile(context.get(), v1::GetProfileRequest(), &response).ok());
  EXPECT_EQ(response.worker_id(), "w-0007");
  EXPECT_EQ(response.memory_budget_bytes(), 256 << 20);
  EXPECT_EQ(response.device(), "cpu");
  EXPECT_EQ(response.threads(), 1);
  EXPECT_EQ(response.version(), "0.4.0");
  EXPECT_EQ(response.calibrated_at().seconds(), 1700000000);
  EXPECT_EQ(response.profile().device_name(), "test CPU");
}

TEST_F(WorkerServiceTest, PlanUsesTheWorkersProfileAndBudget) {
  v1::PlanRequest request;
  *request.mutable_model() = planner::ModelConfigToProto(TinyConfig());
  request.set_sequence_length(1024);
  auto context = rpc::MakeClientContext(kToken, std::chrono::seconds(30));
  v1::MemoryPlan plan;
  grpc::Status status = stub_->Plan(context.get(), request, &plan);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(plan.worker_id(), "w-0007");
  EXPECT_EQ(plan.memory_budget_bytes(), 256 << 20);
  EXPECT_EQ(plan.usable_bytes(), static_cast<int64_t>((256 << 20) * 0.9));
  EXPECT_EQ(plan.documents(), 1);
  EXPECT_TRUE(plan.has_chosen());
  EXPECT_FALSE(plan.frontier().empty());  // include_frontier defaults to true

  request.set_memory_budget_bytes(1024);  // what-if: nothing fits → a refusal, not an error
  context = rpc::MakeClientContext(kToken, std::chrono::seconds(30));
  status = stub_->Plan(context.get(), request, &plan);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(plan.has_refusal());

  for (const auto& [field, corrupt] :
       std::vector<std::pair<std::string, std::function<void(v1::PlanRequest*)>>>{
           {"sequence_length", [](v1::PlanRequest* r) { r->set_sequence_length(0); }},
           {"memory_budget_bytes", [](v1::PlanRequest* r) { r->set_memory_budget_bytes(0); }},
           {"safety_margin", [](v1::PlanRequest* r) { r->set_safety_margin(1.0); }},
           {"documents", [](v1::PlanRequest* r) { r->set_documents(0); }},
           {"model", [](v1::PlanRequest* r) { r->mutable_model()->set_d_model(30); }},
           {"model", [](v1::PlanRequest* r) { r->clear_model(); }},
       }) {
    v1::PlanRequest bad = request;
    bad.clear_memory_budget_bytes();
    corrupt(&bad);
    context = rpc::MakeClientContext(kToken, std::chrono::seconds(30));
    status = stub_->Plan(context.get(), bad, &plan);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_THAT(status.error_message(), HasSubstr(field)) << field;
  }
}

}  // namespace
}  // namespace slimfit::worker
