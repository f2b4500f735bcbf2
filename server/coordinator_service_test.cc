// CoordinatorService: every status code it carries to the client, each reached by a real request
// — with the ErrorDetail trailer where the coordinator attaches one (the field of an invalid
// argument, the missing resource, the limits, the current parameter version) — and the streams of
// an export and a parameter fetch. The suite is coordinator_service_test_fixture.h's; one test
// shuts a coordinator of its own down under a watching client (UNAVAILABLE).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"
#include "server/coordinator_service_test_fixture.h"
#include "server/test_job_spec.h"
#include "server/test_worker_request.h"

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;
using Code = absl::StatusCode;

// One request of a status-code table: the code and message the client gets, and what the
// ErrorDetail of the trailers says.
struct Expected {
  std::string name;
  Rpc rpc;
  std::string authorization;
  Code code;
  std::string message;                                 // a part of it
  std::function<void(const v1::ErrorDetail&)> detail;  // null: no detail expected
};

void Check(const Expected& expected) {
  const absl::Status status = Call(expected.authorization, expected.rpc);
  EXPECT_EQ(status.code(), expected.code) << expected.name << ": " << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(expected.message)) << expected.name;
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(status);
  if (expected.detail == nullptr) return;
  ASSERT_TRUE(detail.has_value()) << expected.name << ": no ErrorDetail trailer: " << status;
  expected.detail(*detail);
}

std::function<void(const v1::ErrorDetail&)> Field(const std::string& field) {
  return [field](const v1::ErrorDetail& detail) { EXPECT_EQ(detail.field(), field); };
}

std::function<void(const v1::ErrorDetail&)> Resource(const std::string& kind, const std::string& id) {
  return [kind, id](const v1::ErrorDetail& detail) {
    EXPECT_EQ(detail.resource_kind(), kind);
    EXPECT_EQ(detail.resource_id(), id);
  };
}

TEST_F(CoordinatorServiceTest, RefusalsCarryTheirCodeAndErrorDetail) {
  const ServiceSuite& s = suite();
  v1::Coordinator::Stub* const stub = CoordinatorServiceTest::stub();
  const std::string client = Bearer(kClientToken);
  const std::string worker = Bearer(s.a.credential);
  using Stub = v1::Coordinator::Stub;
  auto submit = [stub](const v1::SubmitJobRequest& request) {
    return Unary(&Stub::SubmitJob, stub, request);
  };
  auto fetch = [stub](const std::string& job_id, uint64_t version) {
    v1::FetchParametersRequest request;
    request.set_job_id(job_id);
    request.set_parameter_version(version);
    return ReadAll(&Stub::FetchParameters, stub, request, {});
  };

  v1::SubmitJobRequest no_rounds = JobRequest("");
  no_rounds.mutable_spec()->set_rounds(0);
  v1::SubmitJobRequest unknown_dataset = JobRequest("");
  unknown_dataset.mutable_spec()->set_dataset_ids(0, "ds-0000000000000000");
  v1::SubmitJobRequest too_long = JobRequest("");
  too_long.mutable_spec()->set_sequence_length(4096);
  too_long.mutable_spec()->set_tokens_per_round(4096);
  v1::SubmitJobRequest too_large = JobRequest("");
  too_large.mutable_spec()->mutable_model()->mutable_config()->set_d_model(512);
  too_large.mutable_spec()->mutable_model()->mutable_config()->set_d_ff(1024);
  v1::ListJobsRequest negative_page;
  negative_page.set_page_size(-1);
  v1::ListJobsRequest foreign_jobs_token;
  foreign_jobs_token.set_page_token("workers:0");
  v1::ListWorkersRequest foreign_workers_token;
  foreign_workers_token.set_page_token("jobs:0");
  v1::RevokeWorkerRequest long_reason;
  long_reason.set_worker_id(s.b.id);
  long_reason.set_reason(std::string(1025, 'r'));
  v1::RevokeWorkerRequest unknown_worker;
  unknown_worker.set_worker_id("w-unknown");
  v1::GetJobRequest unknown_job;
  unknown_job.set_job_id("job-999999");
  v1::ExportModelRequest no_such_round;
  no_such_round.set_job_id(s.queued_job);
  no_such_round.set_round(7);
  v1::HeartbeatRequest stale;
  stale.set_worker_id(s.superseded.id);
  stale.set_incarnation(s.superseded.incarnation);
  stale.set_state(v1::WORKER_STATE_IDLE);
  v1::RegisterWorkerRequest no_budget = TestWorkerRequest(0);

  const std::string corpus = TestCorpus();
  const std::string other = corpus + "One more document.";
  v1::UploadMetadata image = TestCorpusMetadata(other);
  image.set_content_type("image/png");
  v1::UploadMetadata oversized = TestCorpusMetadata(other);
  oversized.set_total_bytes(kUploadLimit + 1);
  v1::UploadMetadata wrong_digest = TestCorpusMetadata(other);
  wrong_digest.set_sha256(base::Sha256Hex("something else"));
  std::vector<v1::UploadDatasetRequest> chunk_first(1);
  chunk_first[0].set_chunk(other);
  std::vector<v1::UploadDatasetRequest> metadata_twice = UploadMessages(TestCorpusMetadata(other), other);
  metadata_twice.insert(metadata_twice.begin() + 1, metadata_twice.front());

  const std::vector<Expected> table = {
      // INVALID_ARGUMENT names the field, in the message and in ErrorDetail.field.
      {"SubmitJob rounds 0", submit(no_rounds), client, Code::kInvalidArgument,
       "spec.rounds: ", Field("spec.rounds")},
      {"ListJobs page_size -1", Unary(&Stub::ListJobs, stub, negative_page), client, Code::kInvalidArgument,
       "page_size: ", Field("page_size")},
      {"RevokeWorker long reason", Unary(&Stub::RevokeWorker, stub, long_reason), client,
       Code::kInvalidArgument, "reason: ", Field("reason")},
      {"UploadDataset content type", Upload(stub, UploadMessages(image, other)), client,
       Code::kInvalidArgument, "metadata.content_type: ", Field("metadata.content_type")},
      {"UploadDataset empty stream", Upload(stub, {}), client, Code::kInvalidArgument, "empty stream",
       nullptr},
      {"UploadDataset chunk first", Upload(stub, chunk_first), client, Code::kInvalidArgument,
       "the first message must carry metadata", nullptr},
      {"UploadDataset metadata twice", Upload(stub, metadata_twice), client, Code::kInvalidArgument,
       "metadata repeated", nullptr},
      {"RegisterWorker budget 0", Unary(&Stub::RegisterWorker, stub, no_budget), Bearer(kJoinToken),
       Code::kInvalidArgument, "memory_budget_bytes: ", Field("memory_budget_bytes")},
      // NOT_FOUND names the resource.
      {"GetJob unknown", Unary(&Stub::GetJob, stub, unknown_job), client, Code::kNotFound, "job-999999",
       Resource("job", "job-999999")},
      {"SubmitJob unknown dataset", submit(unknown_dataset), client, Code::kNotFound, "ds-0000000000000000",
       Resource("dataset", "ds-0000000000000000")},
      {"RevokeWorker unknown", Unary(&Stub::RevokeWorker, stub, unknown_worker), client, Code::kNotFound,
       "w-unknown", nullptr},
      {"ExportModel round 7", ReadAll(&Stub::ExportModel, stub, no_such_round, {}), client, Code::kNotFound,
       "round 7", Resource("checkpoint", s.queued_job)},
      {"FetchParameters version 2", fetch(s.queued_job, 2), worker, Code::kNotFound, "never published",
       nullptr},
      // FAILED_PRECONDITION: well formed, refused by the state.
      {"SubmitJob too little data", submit(too_long), client, Code::kFailedPrecondition,
       "sequence_length is 4096", nullptr},
      {"Heartbeat superseded", Unary(&Stub::Heartbeat, stub, stale), Bearer(s.superseded.credential),
       Code::kFailedPrecondition, "was superseded", nullptr},
      {"FetchParameters of a cancelled job", fetch(s.cancelled_job, 1), worker, Code::kFailedPrecondition,
       "JOB_STATE_CANCELLED", nullptr},
      // RESOURCE_EXHAUSTED with the numbers.
      {"UploadDataset above the limit", Upload(stub, UploadMessages(oversized, other)), client,
       Code::kResourceExhausted, absl::StrCat(kUploadLimit),
       [](const v1::ErrorDetail& d) { EXPECT_EQ(d.limit_bytes(), kUploadLimit); }},
      {"SubmitJob model above the limit", submit(too_large), client, Code::kResourceExhausted,
       "--max_model_bytes",
       [](const v1::ErrorDetail& d) {
         EXPECT_EQ(d.limit_bytes(), kMaxModelBytes);
         EXPECT_GT(d.required_bytes(), kMaxModelBytes);
       }},
      // OUT_OF_RANGE: a page token of another listing.
      {"ListJobs foreign token", Unary(&Stub::ListJobs, stub, foreign_jobs_token), client, Code::kOutOfRange,
       "workers:0", nullptr},
      {"ListWorkers foreign token", Unary(&Stub::ListWorkers, stub, foreign_workers_token), client,
       Code::kOutOfRange, "jobs:0", nullptr},
      // ABORTED: a stale parameter version, and which one is current.
      {"FetchParameters version 0", fetch(s.queued_job, 0), worker, Code::kAborted, "stale",
       [](const v1::ErrorDetail& d) { EXPECT_EQ(d.current_parameter_version(), 1u); }},
      // DATA_LOSS: the bytes are not what their SHA-256 says.
      {"UploadDataset wrong digest", Upload(stub, UploadMessages(wrong_digest, other)), client,
       Code::kDataLoss, "SHA-256", nullptr},
  };
  for (const Expected& expected : table) Check(expected);
}

TEST_F(CoordinatorServiceTest, ExportStreamsTheCheckpointAndItsDigest) {
  const ServiceSuite& s = suite();
  v1::ExportModelRequest request;
  request.set_job_id(s.queued_job);
  std::vector<v1::ExportModelResponse> messages;
  const absl::Status status =
      Call(Bearer(kClientToken), ReadAll(&v1::Coordinator::Stub::ExportModel, stub(), request, &messages));
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_GE(messages.size(), 3u);
  ASSERT_TRUE(messages.front().has_header());
  EXPECT_EQ(messages.front().header().job_id(), s.queued_job);
  EXPECT_EQ(messages.front().header().round(), 0);
  EXPECT_EQ(messages.front().header().total_bytes(), s.queued_checkpoint.bytes());
  std::string file;
  for (size_t i = 1; i + 1 < messages.size(); ++i) file += messages[i].chunk();
  ASSERT_TRUE(messages.back().has_trailer());
  EXPECT_EQ(static_cast<int64_t>(file.size()), s.queued_checkpoint.bytes());
  EXPECT_EQ(messages.back().trailer().total_bytes(), s.queued_checkpoint.bytes());
  EXPECT_EQ(messages.back().trailer().sha256(), s.queued_checkpoint.sha256());
  EXPECT_EQ(base::Sha256Hex(file), s.queued_checkpoint.sha256());

  // A checkpoint file gone from disk is DATA_LOSS, not a truncated export.
  const std::string path = absl::StrCat(s.state_dir, "/jobs/", s.cancelled_job, "/round-000000.safetensors");
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  request.set_job_id(s.cancelled_job);
  std::vector<v1::ExportModelResponse> lost;
  const absl::Status missing =
      Call(Bearer(kClientToken), ReadAll(&v1::Coordinator::Stub::ExportModel, stub(), request, &lost));
  EXPECT_EQ(missing.code(), Code::kDataLoss) << missing;
  for (const v1::ExportModelResponse& message : lost) EXPECT_FALSE(message.has_trailer());
}

// A checkpoint whose bytes changed on disk since it was written (a byte flipped in place) ends the
// export with DATA_LOSS naming the file, without a trailer: it never goes out as a success.
// Flipped back, it exports again.
TEST_F(CoordinatorServiceTest, ExportOfACheckpointChangedOnDiskIsDataLoss) {
  const ServiceSuite& s = suite();
  const std::string path = absl::StrCat(s.state_dir, "/jobs/", s.queued_job, "/round-000000.safetensors");
  auto flip = [&path] {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.good()) << path;
    file.seekg(-8, std::ios::end);
    const char byte = static_cast<char>(file.get());
    file.seekp(-8, std::ios::end);
    file.put(static_cast<char>(byte ^ 0x5A));
    ASSERT_TRUE(file.good()) << path;
  };
  v1::ExportModelRequest request;
  request.set_job_id(s.queued_job);
  std::vector<v1::ExportModelResponse> messages;
  ASSERT_NO_FATAL_FAILURE(flip());
  const absl::Status changed =
      Call(Bearer(kClientToken), ReadAll(&v1::Coordinator::Stub::ExportModel, stub(), request, &messages));
  ASSERT_NO_FATAL_FAILURE(flip());  // as written again, for the suite's other tests
  EXPECT_EQ(changed.code(), Code::kDataLoss) << changed;
  EXPECT_THAT(std::string(changed.message()), HasSubstr(path));
  EXPECT_THAT(std::string(changed.message()), HasSubstr(s.queued_checkpoint.sha256()));
  for (const v1::ExportModelResponse& message : messages) EXPECT_FALSE(message.has_trailer());
  messages.clear();
  const absl::Status restored =
      Call(Bearer(kClientToken), ReadAll(&v1::Coordinator::Stub::ExportModel, stub(), request, &messages));
  EXPECT_TRUE(restored.ok()) << restored;
  ASSERT_FALSE(messages.empty());
  EXPECT_EQ(messages.back().trailer().sha256(), s.queued_checkpoint.sha256());
}

TEST_F(CoordinatorServiceTest, FetchParametersStreamsTheCurrentVersion) {
  const ServiceSuite& s = suite();
  v1::FetchParametersRequest request;
  request.set_job_id(s.queued_job);
  request.set_parameter_version(1);
  std::vector<v1::FetchParametersResponse> messages;
  const absl::Status status = Call(
      Bearer(s.b.credential), ReadAll(&v1::Coordinator::Stub::FetchParameters, stub(), request, &messages));
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_GE(messages.size(), 2u);
  ASSERT_TRUE(messages.front().has_manifest());
  const v1::ParameterManifest& manifest = messages.front().manifest();
  EXPECT_EQ(manifest.job_id(), s.queued_job);
  EXPECT_EQ(manifest.parameter_version(), 1u);
  EXPECT_EQ(manifest.config().d_model(), 8);
  EXPECT_GT(manifest.tensors_size(), 0);
  for (size_t i = 1; i < messages.size(); ++i) EXPECT_TRUE(messages[i].has_chunk()) << i;
}

// A coordinator of its own: it is shut down while a client watches.
TEST(CoordinatorServiceShutdownTest, AWatchEndsUnavailableWhenTheCoordinatorShutsDown) {
  CoordinatorOptions options;
  options.state_dir = testing_util::TempPath("coordinator_service_shutdown");
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator = Coordinator::Create(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::StatusOr<std::unique_ptr<AccessTokens>> client = AccessTokens::Create("client", kClientToken, "");
  absl::StatusOr<std::unique_ptr<AccessTokens>> join = AccessTokens::Create("join", kJoinToken, "");
  ASSERT_TRUE(client.ok() && join.ok());
  std::unique_ptr<Served> served = Serve(coordinator->get(), client->get(), join->get(), false);
  ASSERT_NE(served, nullptr);
  const std::string corpus = TestCorpus();
  v1::DatasetInfo info;
  ASSERT_TRUE(Call(Bearer(kClientToken),
                   Upload(served->stub.get(), UploadMessages(TestCorpusMetadata(corpus), corpus), &info))
                  .ok());
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = TestJobSpec(info.dataset_id());
  v1::Job job;
  ASSERT_TRUE(Call(Bearer(kClientToken), [&](grpc::ClientContext* c) {
                return served->stub->SubmitJob(c, submit, &job);
              }).ok());

  grpc::ClientContext context;
  context.AddMetadata(rpc::kAuthorizationKey, Bearer(kClientToken));
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::WatchJobRequest watch;
  watch.set_job_id(job.job_id());
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = served->stub->WatchJob(&context, watch);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(event.has_snapshot());
  (*coordinator)->Shutdown();
  while (reader->Read(&event)) {
  }
  const absl::Status ended = rpc::FromGrpcStatus(reader->Finish(), "WatchJob", &context);
  EXPECT_EQ(ended.code(), Code::kUnavailable) << ended;
  EXPECT_THAT(std::string(ended.message()), HasSubstr("shutting down"));
  served->server->Shutdown();
}

}  // namespace
}  // namespace slimfit::server
