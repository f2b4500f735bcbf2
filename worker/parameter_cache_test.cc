#include "worker/parameter_cache.h"

#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/rpc_util.h"
#include "worker/test_coordinator.h"

namespace slimfit::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr char kToken[] = "worker-secret";

performer::ModelConfig TinyConfig() {
  performer::ModelConfig config;
  config.vocab = 64;
  config.d_model = 16;
  config.layers = 1;
  config.heads = 2;
  config.d_ff = 32;
  return config;
}

performer::PerformerModel MakeModel(uint64_t seed, performer::DType dtype = performer::DType::kFloat32) {
  absl::StatusOr<performer::PerformerModel> model = performer::PerformerModel::Create(TinyConfig(), dtype, at::kCPU, seed);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

void ExpectSameParameters(const performer::PerformerModel& got, const performer::PerformerModel& want) {
  ASSERT_EQ(got.names(), want.names());
  for (size_t i = 0; i < got.names().size(); ++i) {
    EXPECT_TRUE(at::equal(got.parameters()[i], want.parameters()[i].to(got.parameters()[i].scalar_type())))
        << got.names()[i];
  }
}

class ParameterCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TestCoordinatorServer::Start(&coordinator_);
    ASSERT_NE(server_, nullptr);
  }

  // A cache presenting a credential the coordinator issued, or `credential` when given.
  std::unique_ptr<ParameterCache> MakeCache(const std::string& credential = "") {
    identities_.push_back(
        std::make_unique<WorkerIdentity>(kToken, credential.empty() ? coordinator_.AddWorker() : credential));
    ParameterCache::Options options;
    options.coordinator = v1::Coordinator::NewStub(rpc::MakeChannel(server_->address()));
    options.identity = identities_.back().get();
    options.fetch_timeout = absl::Seconds(10);
    return std::make_unique<ParameterCache>(options);
  }

  TestCoordinator coordinator_;
  std::unique_ptr<TestCoordinatorServer> server_;
  std::vector<std::unique_ptr<WorkerIdentity>> identities_;
};

TEST_F(ParameterCacheTest, FetchesOnceAndRebuildsTheModel) {
  const performer::PerformerModel published = MakeModel(1);
  coordinator_.Publish("job-1", 3, published);
  std::unique_ptr<ParameterCache> cache = MakeCache();
  auto model = cache->Get("job-1", 3, performer::DType::kFloat32);
  ASSERT_TRUE(model.ok()) << model.status();
  ExpectSameParameters(**model, published);
  EXPECT_EQ((*model)->config().d_model, 16);
  auto again = cache->Get("job-1", 3, performer::DType::kFloat32);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), model->get());
  EXPECT_EQ(coordinator_.FetchCount("job-1", 3), 1);
  EXPECT_THAT(cache->CachedVersions(), UnorderedElementsAre(Pair("job-1", 3u)));
}

TEST_F(ParameterCacheTest, ConcurrentRequestsShareOneFetch) {
  coordinator_.Publish("job-1", 1, MakeModel(1));
  coordinator_.SetFetchDelay(absl::Milliseconds(300));
  std::unique_ptr<ParameterCache> cache = MakeCache();
  std::vector<std::thread> threads;
  std::vector<const performer::PerformerModel*> got(4, nullptr);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto model = cache->Get("job-1", 1, performer::DType::kFloat32);
      EXPECT_TRUE(model.ok()) << model.status();
      if (model.ok()) got[i] = model->get();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(coordinator_.FetchCount("job-1", 1), 1);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(got[i], got[0]);
}

TEST_F(ParameterCacheTest, KeepsOnlyTheLatestVersionAndDropsFinishedJobs) {
  std::unique_ptr<ParameterCache> cache = MakeCache();
  coordinator_.Publish("job-1", 1, MakeModel(1));
  coordinator_.Publish("job-2", 5, MakeModel(2));
  auto old_model = cache->Get("job-1", 1, performer::DType::kFloat32);
  ASSERT_TRUE(old_model.ok());
  ASSERT_TRUE(cache->Get("job-2", 5, performer::DType::kFloat32).ok());
  const performer::PerformerModel newer = MakeModel(3);
  coordinator_.Publish("job-1", 2, newer);
  auto model = cache->Get("job-1", 2, performer::DType::kFloat32);
  ASSERT_TRUE(model.ok()) << model.status();
  ExpectSameParameters(**model, newer);
  EXPECT_THAT(cache->CachedVersions(), UnorderedElementsAre(Pair("job-1", 2u), Pair("job-2", 5u)));
  // The model handed out earlier stays valid.
  EXPECT_EQ((*old_model)->parameters().size(), newer.parameters().size());

  cache->Drop("job-2");
  cache->Drop("job-2");
  EXPECT_THAT(cache->CachedVersions(), UnorderedElementsAre(Pair("job-1", 2u)));
}

TEST_F(ParameterCacheTest, OtherJobsCanBeMeasuredDroppedOrAllForgotten) {
  std::unique_ptr<ParameterCache> cache = MakeCache();
  const performer::PerformerModel one = MakeModel(1);
  coordinator_.Publish("job-1", 1, one);
  coordinator_.Publish("job-2", 1, MakeModel(2));
  ASSERT_TRUE(cache->Get("job-1", 1, performer::DType::kFloat32).ok());
  EXPECT_EQ(cache->BytesOfOtherJobs("job-2"), one.parameter_bytes());
  ASSERT_TRUE(cache->Get("job-2", 1, performer::DType::kFloat32).ok());
  EXPECT_EQ(cache->BytesOfOtherJobs("job-2"), one.parameter_bytes());
  EXPECT_EQ(cache->Bytes(), one.parameter_bytes() + MakeModel(2).parameter_bytes());
  cache->DropOtherJobs("job-2");
  EXPECT_THAT(cache->CachedVersions(), UnorderedElementsAre(Pair("job-2", 1u)));
  EXPECT_EQ(cache->BytesOfOtherJobs("job-2"), 0);
  cache->Clear();
  EXPECT_TRUE(cache->CachedVersions().empty());
}

TEST_F(ParameterCacheTest, AFetchEndsAtTheCallersDeadline) {
  std::unique_ptr<ParameterCache> cache = MakeCache();  // fetch_timeout 10 s
  coordinator_.Publish("job-1", 1, MakeModel(1));
  coordinator_.SetFetchDelay(absl::Milliseconds(1500));
  const absl::Time start = absl::Now();
  auto model = cache->Get("job-1", 1, performer::DType::kFloat32, absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnavailable) << model.status();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1200));
  // The failed fetch is not cached: a later call with time to spare gets the model.
  coordinator_.SetFetchDelay(absl::ZeroDuration());
  EXPECT_TRUE(cache->Get("job-1", 1, performer::DType::kFloat32).ok());
}

TEST_F(ParameterCacheTest, ConvertsToThePlanDtypeOnce) {
  const performer::PerformerModel published = MakeModel(4);
  coordinator_.Publish("job-1", 1, published);
  std::unique_ptr<ParameterCache> cache = MakeCache();
  auto model = cache->Get("job-1", 1, performer::DType::kFloat64);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->dtype(), performer::DType::kFloat64);
  ExpectSameParameters(**model, published);
  auto again = cache->Get("job-1", 1, performer::DType::kFloat64);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), model->get());
  EXPECT_EQ(coordinator_.FetchCount("job-1", 1), 1);
}

TEST_F(ParameterCacheTest, CoordinatorErrorsMapAsTheProtocolSays) {
  coordinator_.Publish("job-1", 4, MakeModel(1));
  std::unique_ptr<ParameterCache> cache = MakeCache();

  auto stale = cache->Get("job-1", 3, performer::DType::kFloat32);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(stale.status().message(), HasSubstr("job job-1 version 3"));
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(stale.status());
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->current_parameter_version(), 4u);

  EXPECT_EQ(cache->Get("job-9", 1, performer::DType::kFloat32).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache->Get("job-1", 5, performer::DType::kFloat32).status().code(), absl::StatusCode::kNotFound);
  // Failures are not cached: the next request asks again.
  EXPECT_EQ(cache->Get("job-1", 5, performer::DType::kFloat32).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coordinator_.FetchCount("job-1", 5), 2);

  auto refused = MakeCache("wc-forged")->Get("job-1", 4, performer::DType::kFloat32);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("refused this worker's token"));

  coordinator_.FinishJob("job-1");
  EXPECT_EQ(cache->Get("job-1", 4, performer::DType::kFloat32).status().code(), absl::StatusCode::kAborted);

  server_->Shutdown();
  auto down = cache->Get("job-2", 1, performer::DType::kFloat32);
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable) << down.status();
}

TEST_F(ParameterCacheTest, RejectsAManifestThatDisagreesWithItsConfig) {
  coordinator_.Publish("job-1", 1, MakeModel(1));
  std::unique_ptr<ParameterCache> cache = MakeCache();

  coordinator_.SetManifestHook([](v1::ParameterManifest* m) { m->mutable_config()->set_d_ff(48); });
  auto shape = cache->Get("job-1", 1, performer::DType::kFloat32);
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(shape.status().message(), HasSubstr("the config needs"));

  coordinator_.SetManifestHook([](v1::ParameterManifest* m) { m->set_parameter_version(2); });
  auto echo = cache->Get("job-1", 1, performer::DType::kFloat32);
  EXPECT_EQ(echo.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(echo.status().message(), HasSubstr("the manifest is for job job-1 version 2"));

  coordinator_.SetManifestHook([](v1::ParameterManifest* m) { m->set_total_bytes(m->total_bytes() + 4); });
  EXPECT_EQ(cache->Get("job-1", 1, performer::DType::kFloat32).status().code(), absl::StatusCode::kInternal);

  coordinator_.SetManifestHook(nullptr);
  EXPECT_TRUE(cache->Get("job-1", 1, performer::DType::kFloat32).ok());
}

}  // namespace
}  // namespace slimfit::worker
