#include "worker/parameter_cache.h"

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"
#include "wire/tensor_codec.h"
#include "worker/test_coordinator.h"

namespace slimfit::worker {
namespace {

using ::testing::ElementsAre;
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
  absl::StatusOr<performer::PerformerModel> model =
      performer::PerformerModel::Create(TinyConfig(), dtype, at::kCPU, seed);
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

// The next version of a job: `from` plus a small step (0.01 × the parameters of a model seeded
// `seed`), as an outer optimizer step would move it.
performer::PerformerModel Moved(const std::vector<at::Tensor>& from, uint64_t seed, performer::DType dtype) {
  const performer::PerformerModel step = MakeModel(seed, dtype);
  std::map<std::string, at::Tensor> named;
  for (size_t i = 0; i < from.size(); ++i) named[step.names()[i]] = from[i] + 0.01 * step.parameters()[i];
  absl::StatusOr<performer::PerformerModel> model =
      performer::PerformerModel::FromTensors(TinyConfig(), named, dtype, at::kCPU);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

// `got`'s parameters hold exactly the bytes of `want` (same dtypes, same bits, model order).
void ExpectBitIdentical(const performer::PerformerModel& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.parameters().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got.parameters()[i].scalar_type(), want[i].scalar_type()) << got.names()[i];
    EXPECT_TRUE(at::equal(got.parameters()[i].cpu(), want[i])) << got.names()[i];
  }
  EXPECT_EQ(performer::TensorsSha256(got.parameters()).value_or("got"),
            performer::TensorsSha256(want).value_or("want"));
}

bool SameValues(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i].cpu(), b[i].cpu().to(a[i].scalar_type()))) return false;
  }
  return true;
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

  // From now on, records the base_version of every manifest the coordinator sends (0: whole
  // parameters), as the worker receives it.
  void RecordServedBases() {
    coordinator_.SetManifestHook([this](v1::ParameterManifest* manifest) {
      absl::MutexLock lock(&served_mu_);
      served_bases_.push_back(manifest->base_version());
    });
  }
  std::vector<uint64_t> ServedBases() {
    absl::MutexLock lock(&served_mu_);
    return served_bases_;
  }

  TestCoordinator coordinator_;
  std::unique_ptr<TestCoordinatorServer> server_;
  std::vector<std::unique_ptr<WorkerIdentity>> identities_;
  absl::Mutex served_mu_;
  std::vector<uint64_t> served_bases_ ABSL_GUARDED_BY(served_mu_);
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

// A worker holding version N offers it; served the encoded difference, it rebuilds version N+1 as
// the coordinator defines it (base + decoded difference), bit for bit, in every encoding and dtype.
TEST_F(ParameterCacheTest, ADeltaFetchRebuildsTheCoordinatorsParametersBitForBit) {
  struct Case {
    v1::Compression compression;
    performer::DType dtype;
  };
  const std::vector<Case> cases = {{v1::COMPRESSION_INT8, performer::DType::kFloat32},
                                   {v1::COMPRESSION_FLOAT16, performer::DType::kFloat32},
                                   {v1::COMPRESSION_BFLOAT16, performer::DType::kFloat64},
                                   {v1::COMPRESSION_INT8, performer::DType::kFloat64}};
  RecordServedBases();
  for (size_t c = 0; c < cases.size(); ++c) {
    const v1::Compression compression = cases[c].compression;
    const performer::DType dtype = cases[c].dtype;
    SCOPED_TRACE(absl::StrCat(performer::CompressionName(compression), " ", performer::DTypeName(dtype)));
    const std::string job = absl::StrCat("job-", c + 1);
    std::unique_ptr<ParameterCache> cache = MakeCache();

    const performer::PerformerModel first = MakeModel(1, dtype);
    coordinator_.Publish(job, 1, first);
    ASSERT_TRUE(cache->Get(job, 1, dtype).ok());
    EXPECT_THAT(coordinator_.FetchBaseVersions(job, 1), ElementsAre(0u));

    const performer::PerformerModel second_exact = Moved(first.parameters(), 2, dtype);
    absl::StatusOr<std::vector<at::Tensor>> second =
        coordinator_.PublishDifference(job, 2, second_exact, compression);
    ASSERT_TRUE(second.ok()) << second.status();
    // Not vacuous: the encoding loses something, and the version moved.
    EXPECT_FALSE(SameValues(*second, second_exact.parameters()));
    EXPECT_FALSE(SameValues(*second, first.parameters()));

    const size_t served_before = ServedBases().size();
    auto got = cache->Get(job, 2, dtype);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_THAT(coordinator_.FetchBaseVersions(job, 2), ElementsAre(1u));
    ASSERT_EQ(ServedBases().size(), served_before + 1);
    EXPECT_EQ(ServedBases().back(), 1u);  // the difference travelled, not the whole parameters
    EXPECT_EQ((*got)->dtype(), dtype);
    ExpectBitIdentical(**got, *second);

    // And on: version 3 relative to the rebuilt version 2.
    absl::StatusOr<std::vector<at::Tensor>> third =
        coordinator_.PublishDifference(job, 3, Moved(*second, 3, dtype), compression);
    ASSERT_TRUE(third.ok()) << third.status();
    got = cache->Get(job, 3, dtype);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_THAT(coordinator_.FetchBaseVersions(job, 3), ElementsAre(2u));
    EXPECT_EQ(ServedBases().back(), 2u);
    ExpectBitIdentical(**got, *third);
    EXPECT_THAT(cache->CachedVersions(), UnorderedElementsAre(Pair(job, 3u)));
    EXPECT_EQ(coordinator_.FetchCount(job, 3), 1);
  }
}

// A worker with nothing cached offers no base (0); one holding an older version than the
// difference's base offers what it holds; both get the whole (rebuilt) parameters.
TEST_F(ParameterCacheTest, AWorkerWithoutTheBaseGetsTheWholeParameters) {
  const performer::PerformerModel first = MakeModel(1);
  coordinator_.Publish("job-1", 1, first);
  std::unique_ptr<ParameterCache> holds_first = MakeCache();
  ASSERT_TRUE(holds_first->Get("job-1", 1, performer::DType::kFloat32).ok());
  absl::StatusOr<std::vector<at::Tensor>> second = coordinator_.PublishDifference(
      "job-1", 2, Moved(first.parameters(), 2, performer::DType::kFloat32), v1::COMPRESSION_INT8);
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<std::vector<at::Tensor>> third = coordinator_.PublishDifference(
      "job-1", 3, Moved(*second, 3, performer::DType::kFloat32), v1::COMPRESSION_INT8);
  ASSERT_TRUE(third.ok()) << third.status();
  RecordServedBases();

  std::unique_ptr<ParameterCache> empty = MakeCache();
  auto got = empty->Get("job-1", 3, performer::DType::kFloat32);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitIdentical(**got, *third);

  got = holds_first->Get("job-1", 3, performer::DType::kFloat32);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitIdentical(**got, *third);

  EXPECT_THAT(coordinator_.FetchBaseVersions("job-1", 3), ElementsAre(0u, 1u));
  EXPECT_THAT(ServedBases(), ElementsAre(0u, 0u));
  EXPECT_EQ(coordinator_.FetchCount("job-1", 3), 2);
}

// A difference that does not rebuild the advertised SHA-256: the worker fetches again without a
// base and keeps the whole parameters.
TEST_F(ParameterCacheTest, ASha256MismatchFetchesTheWholeParameters) {
  const performer::PerformerModel first = MakeModel(1);
  coordinator_.Publish("job-1", 1, first);
  std::unique_ptr<ParameterCache> cache = MakeCache();
  ASSERT_TRUE(cache->Get("job-1", 1, performer::DType::kFloat32).ok());
  TestCoordinator::DifferenceOptions corrupt;
  corrupt.corrupt_sha256 = true;
  absl::StatusOr<std::vector<at::Tensor>> second = coordinator_.PublishDifference(
      "job-1", 2, Moved(first.parameters(), 2, performer::DType::kFloat32), v1::COMPRESSION_INT8, corrupt);
  ASSERT_TRUE(second.ok()) << second.status();
  RecordServedBases();

  auto got = cache->Get("job-1", 2, performer::DType::kFloat32);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitIdentical(**got, *second);
  EXPECT_THAT(coordinator_.FetchBaseVersions("job-1", 2), ElementsAre(1u, 0u));
  EXPECT_THAT(ServedBases(), ElementsAre(1u, 0u));
  EXPECT_THAT(cache->CachedVersions(), UnorderedElementsAre(Pair("job-1", 2u)));

  // Kept: the next Get asks nobody.
  auto again = cache->Get("job-1", 2, performer::DType::kFloat32);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->get(), got->get());
  EXPECT_EQ(coordinator_.FetchCount("job-1", 2), 2);
}

TEST_F(ParameterCacheTest, AManifestThatIsNoAnswerToTheOfferIsRefused) {
  const performer::PerformerModel first = MakeModel(1);
  coordinator_.Publish("job-1", 1, first);
  std::unique_ptr<ParameterCache> holds_first = MakeCache();
  ASSERT_TRUE(holds_first->Get("job-1", 1, performer::DType::kFloat32).ok());
  // A coordinator that answers with the difference to version 1 whatever the request offers.
  TestCoordinator::DifferenceOptions always;
  always.ignore_request_base = true;
  absl::StatusOr<std::vector<at::Tensor>> second = coordinator_.PublishDifference(
      "job-1", 2, Moved(first.parameters(), 2, performer::DType::kFloat32), v1::COMPRESSION_INT8, always);
  ASSERT_TRUE(second.ok()) << second.status();

  // Offered nothing (nothing cached).
  std::unique_ptr<ParameterCache> empty = MakeCache();
  auto refused = empty->Get("job-1", 2, performer::DType::kFloat32);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInternal) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("job job-1 version 2"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("relative to version 1, which this worker did not offer"));
  EXPECT_THAT(coordinator_.FetchBaseVersions("job-1", 2), ElementsAre(0u));  // no second fetch
  EXPECT_TRUE(empty->CachedVersions().empty());

  // Offered version 1; the manifest names another.
  coordinator_.SetManifestHook([](v1::ParameterManifest* m) { m->set_base_version(7); });
  refused = holds_first->Get("job-1", 2, performer::DType::kFloat32);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInternal) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("relative to version 7, which this worker did not offer"));

  // A difference that claims to be exact, and whole parameters that claim an encoding.
  coordinator_.SetManifestHook([](v1::ParameterManifest* m) { m->set_compression(v1::COMPRESSION_NONE); });
  refused = holds_first->Get("job-1", 2, performer::DType::kFloat32);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInternal) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("does not go with a difference"));
  coordinator_.Publish("job-2", 1, MakeModel(2));
  coordinator_.SetManifestHook([](v1::ParameterManifest* m) { m->set_compression(v1::COMPRESSION_INT8); });
  refused = empty->Get("job-2", 1, performer::DType::kFloat32);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInternal) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("does not go with whole parameters"));

  // None of it was kept; an honest answer is taken.
  EXPECT_THAT(coordinator_.FetchBaseVersions("job-1", 2), ElementsAre(0u, 1u, 1u));
  EXPECT_THAT(holds_first->CachedVersions(), UnorderedElementsAre(Pair("job-1", 1u)));
  coordinator_.SetManifestHook(nullptr);
  auto got = holds_first->Get("job-1", 2, performer::DType::kFloat32);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitIdentical(**got, *second);
  EXPECT_THAT(coordinator_.FetchBaseVersions("job-1", 2), ElementsAre(0u, 1u, 1u, 1u));
}

}  // namespace
}  // namespace slimfit::worker
