#include "client/submit_command.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace slimfit::client {
namespace {

using ::slimfit::testing_util::TempPath;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Le;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

std::string WriteFile(const std::string& name, const std::string& contents) {
  return testing_util::WriteTempFile(name, contents);
}

class SubmitCommandTest : public ::testing::Test {
 protected:
  SubmitCommandTest() : fake_(FakeCoordinator::Start()) {
    fake_->submit_job = [](const v1::SubmitJobRequest& request, v1::Job* job) {
      job->set_job_id("job-000001");
      *job->mutable_spec() = request.spec();
      job->set_state(v1::JOB_STATE_QUEUED);
      job->set_state_reason("waiting for 1 eligible worker (0 live)");
      return grpc::Status::OK;
    };
  }

  absl::Status Submit(std::vector<std::string> args) {
    args.push_back("--coordinator=" + fake_->address());
    args.push_back("--token=client-token");
    out_.str("");
    return RunSubmitCommand(args, out_, /*terminal=*/false);
  }

  v1::SubmitJobRequest OnlySubmit() const {
    const ReceivedCalls calls = fake_->calls();
    EXPECT_EQ(calls.submit_job.size(), 1u);
    return calls.submit_job.empty() ? v1::SubmitJobRequest() : calls.submit_job[0];
  }

  std::unique_ptr<FakeCoordinator> fake_;
  std::ostringstream out_;
};

TEST_F(SubmitCommandTest, SpecFromTextProtoAndFlagsWithUploadedData) {
  const std::string spec = WriteFile("job.textproto", R"pb(
    name: "tiny"
    dataset_ids: "ds-earlier"
    sequence_length: 256
    tokens_per_round: 1024
    rounds: 100
    model { config { d_model: 64 layers: 2 heads: 4 } }
    optimizer {
      sgd { momentum: 0.9 }
      learning_rate: 0.1
    }
  )pb");
  const std::string a = WriteFile("a.txt", "alpha\n\nbeta\n");
  const std::string b = WriteFile("b.txt", "gamma");
  const std::string c = WriteFile("c.txt", std::string(1536 * 1024, 'x'));  // 1.5 MiB: two chunks
  const absl::Status status = Submit({spec, "--data", a, "--data=" + b + "," + c, "--separator=\\n\\n",
                                      "--rounds=5", "--learning_rate=0.01", "--layers=3", "--seed=7"});
  ASSERT_TRUE(status.ok()) << status;

  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.upload_dataset.size(), 3u);
  const std::vector<std::string> files = {a, b, c};
  std::vector<std::string> ids;
  for (size_t i = 0; i < files.size(); ++i) {
    const ReceivedUpload& upload = calls.upload_dataset[i];
    std::ifstream file(files[i], std::ios::binary);
    const std::string contents((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(upload.metadata_first);
    EXPECT_EQ(upload.content, contents) << files[i];
    EXPECT_EQ(upload.metadata.total_bytes(), static_cast<int64_t>(contents.size()));
    EXPECT_EQ(upload.metadata.sha256(), base::Sha256Hex(contents));
    EXPECT_EQ(upload.metadata.content_type(), "text/plain");
    EXPECT_EQ(upload.metadata.document_separator(), "\n\n");
    EXPECT_THAT(upload.chunk_sizes, Each(Le(size_t{v1::LIMIT_MAX_CHUNK_BYTES})));
    ids.push_back("ds-" + base::Sha256Hex(contents).substr(0, 12));
  }
  EXPECT_THAT(calls.upload_dataset[2].chunk_sizes, ElementsAre(1024 * 1024, 512 * 1024));

  const v1::SubmitJobRequest request = OnlySubmit();
  const v1::JobSpec& sent = request.spec();
  EXPECT_EQ(sent.name(), "tiny");
  EXPECT_THAT(sent.dataset_ids(), ElementsAre("ds-earlier", ids[0], ids[1], ids[2]));
  EXPECT_EQ(sent.sequence_length(), 256);
  EXPECT_EQ(sent.tokens_per_round(), 1024);
  EXPECT_EQ(sent.rounds(), 5);  // flag over spec
  EXPECT_EQ(sent.model().config().d_model(), 64);
  EXPECT_EQ(sent.model().config().layers(), 3);  // flag over spec
  EXPECT_TRUE(sent.optimizer().has_sgd());       // the spec's kind is kept
  EXPECT_EQ(sent.optimizer().sgd().momentum(), 0.9);
  EXPECT_EQ(sent.optimizer().learning_rate(), 0.01);
  EXPECT_EQ(sent.seed(), 7u);
  EXPECT_FALSE(sent.has_min_workers());  // not given: the coordinator's default
  EXPECT_FALSE(sent.has_verify_fraction());
  EXPECT_FALSE(sent.has_quarantine_after());
  EXPECT_THAT(request.request_id(),
              MatchesRegex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"));
  EXPECT_THAT(calls.authorizations, Each(std::string("Bearer client-token")));

  EXPECT_THAT(out_.str(),
              HasSubstr("uploaded " + a + " as " + ids[0] + " (12 B, 12 tokens in 1 document)\n"));
  EXPECT_THAT(out_.str(),
              HasSubstr("submitted job-000001 \"tiny\": QUEUED, round 0/5 (waiting for 1 eligible "
                        "worker (0 live))\n"));
}

TEST_F(SubmitCommandTest, FlagsAloneMakeAFreshAdamWJob) {
  const std::string data = WriteFile("tokens.bin", std::string(64, '\1'));
  ASSERT_TRUE(Submit({"--data", data, "--data_type=uint16", "--name=flags", "--sequence_length=16",
                      "--tokens_per_round=32", "--rounds=2", "--learning_rate=3e-4", "--d_model=32",
                      "--feature_map=favor+", "--min_workers=2", "--held_out_fraction=0.1",
                      "--verify_fraction=0.2", "--quarantine_after=5", "--eval_interval=1",
                      "--checkpoint_interval=1", "--dtype=float64", "--request_id=retry-key-1"})
                  .ok());
  const v1::SubmitJobRequest request = OnlySubmit();
  const v1::JobSpec& spec = request.spec();
  EXPECT_EQ(request.request_id(), "retry-key-1");
  EXPECT_EQ(spec.name(), "flags");
  EXPECT_TRUE(spec.optimizer().has_adamw());
  EXPECT_EQ(spec.optimizer().learning_rate(), 3e-4);
  EXPECT_EQ(spec.model().config().d_model(), 32);
  EXPECT_EQ(spec.model().config().feature_map(), v1::FEATURE_MAP_FAVOR);
  EXPECT_FALSE(spec.model().config().has_layers());
  EXPECT_EQ(spec.min_workers(), 2);
  EXPECT_EQ(spec.held_out_fraction(), 0.1);
  EXPECT_EQ(spec.verify_fraction(), 0.2);
  EXPECT_EQ(spec.quarantine_after(), 5);
  EXPECT_EQ(spec.eval_interval_rounds(), 1);
  EXPECT_EQ(spec.checkpoint_interval_rounds(), 1);
  EXPECT_EQ(spec.dtype(), v1::DTYPE_FLOAT64);
  EXPECT_FALSE(spec.bf16_products());
  const ReceivedUpload upload = fake_->calls().upload_dataset.at(0);
  EXPECT_EQ(upload.metadata.content_type(), "application/x-slimfit-tokens");
  EXPECT_EQ(upload.metadata.token_encoding(), v1::TOKEN_ENCODING_UINT16_LE);
  EXPECT_FALSE(upload.metadata.has_document_separator());
}

TEST_F(SubmitCommandTest, Bf16ProductsFlagWritesTheSpec) {
  const std::string data = WriteFile("tokens.bin", std::string(64, '\1'));
  ASSERT_TRUE(Submit({"--data", data, "--sequence_length=16", "--tokens_per_round=32", "--rounds=1",
                      "--learning_rate=1e-3", "--bf16_products"})
                  .ok());
  EXPECT_TRUE(OnlySubmit().spec().bf16_products());
}

TEST_F(SubmitCommandTest, LocalStepsFlagsWriteTheOuterOptimizer) {
  const std::string data = WriteFile("local.txt", "some text to train on");
  ASSERT_TRUE(
      Submit({"--data", data, "--local_steps=20", "--outer_learning_rate=1", "--outer_momentum=0"}).ok());
  const v1::JobSpec spec = OnlySubmit().spec();
  EXPECT_EQ(spec.local_steps(), 20);
  ASSERT_TRUE(spec.outer_optimizer().has_sgd());
  EXPECT_EQ(spec.outer_optimizer().learning_rate(), 1);
  EXPECT_TRUE(spec.outer_optimizer().sgd().has_momentum());
  EXPECT_EQ(spec.outer_optimizer().sgd().momentum(), 0);
  EXPECT_FALSE(spec.outer_optimizer().sgd().nesterov());
  EXPECT_TRUE(spec.optimizer().has_adamw());  // the inner optimizer is the job's
}

TEST_F(SubmitCommandTest, LocalStepsAloneLeaveTheOuterOptimizerToTheCoordinator) {
  const std::string data = WriteFile("local.txt", "some text to train on");
  ASSERT_TRUE(Submit({"--data", data, "--local_steps=5"}).ok());
  const v1::JobSpec spec = OnlySubmit().spec();
  EXPECT_EQ(spec.local_steps(), 5);
  EXPECT_FALSE(spec.has_outer_optimizer());
}

TEST_F(SubmitCommandTest, BadLocalStepsFlagsAreRefusedBeforeAnythingIsSent) {
  const std::string data = WriteFile("local.txt", "some text to train on");
  absl::Status status = Submit({"--data", data, "--local_steps=0"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--local_steps=0: expected 1 to 10000"));
  status = Submit({"--data", data, "--local_steps=10001"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  status = Submit({"--data", data, "--outer_momentum=0.5"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--outer_momentum: only with --local_steps"));
  EXPECT_TRUE(fake_->calls().upload_dataset.empty());
  EXPECT_TRUE(fake_->calls().submit_job.empty());
}

TEST_F(SubmitCommandTest, CompressionFlagsWriteTheSpec) {
  const std::string data = WriteFile("compressed.txt", "some text to train on");
  ASSERT_TRUE(Submit({"--data", data, "--local_steps=5", "--compress_pseudo_gradients=int8",
                      "--compress_parameters=float16"})
                  .ok());
  const v1::JobSpec spec = OnlySubmit().spec();
  EXPECT_EQ(spec.local_steps(), 5);
  EXPECT_EQ(spec.compression().pseudo_gradients(), v1::COMPRESSION_INT8);
  EXPECT_EQ(spec.compression().parameters(), v1::COMPRESSION_FLOAT16);
}

TEST_F(SubmitCommandTest, CompressionNamesAreCaseInsensitive) {
  const std::string data = WriteFile("compressed.txt", "some text to train on");
  ASSERT_TRUE(Submit({"--data", data, "--local_steps=5", "--compress_pseudo_gradients=INT8",
                      "--compress_parameters=BFloat16"})
                  .ok());
  const v1::JobSpec spec = OnlySubmit().spec();
  EXPECT_EQ(spec.compression().pseudo_gradients(), v1::COMPRESSION_INT8);
  EXPECT_EQ(spec.compression().parameters(), v1::COMPRESSION_BFLOAT16);
}

TEST_F(SubmitCommandTest, WithoutCompressionFlagsTheCoordinatorDecides) {
  ASSERT_TRUE(Submit({"--data", WriteFile("exact.txt", "some text"), "--local_steps=5"}).ok());
  EXPECT_FALSE(OnlySubmit().spec().has_compression());
}

TEST_F(SubmitCommandTest, CompressedParametersNeedNoLocalSteps) {
  ASSERT_TRUE(Submit({"--data", WriteFile("sync.txt", "some text"), "--compress_parameters=int8",
                      "--compress_pseudo_gradients=none"})
                  .ok());
  const v1::JobSpec spec = OnlySubmit().spec();
  EXPECT_FALSE(spec.has_local_steps());
  EXPECT_EQ(spec.compression().parameters(), v1::COMPRESSION_INT8);
  EXPECT_EQ(spec.compression().pseudo_gradients(), v1::COMPRESSION_NONE);
}

TEST_F(SubmitCommandTest, LocalStepsInTheSpecAllowCompressedPseudoGradients) {
  const std::string spec_path = WriteFile("local.textproto", "local_steps: 3\n");
  ASSERT_TRUE(
      Submit({spec_path, "--data", WriteFile("l.txt", "some text"), "--compress_pseudo_gradients=float16"})
          .ok());
  const v1::JobSpec spec = OnlySubmit().spec();
  EXPECT_EQ(spec.local_steps(), 3);
  EXPECT_EQ(spec.compression().pseudo_gradients(), v1::COMPRESSION_FLOAT16);
}

TEST_F(SubmitCommandTest, BadCompressionFlagsAreRefusedBeforeAnythingIsSent) {
  const std::string data = WriteFile("bad.txt", "some text to train on");
  for (const std::string flag : {"compress_pseudo_gradients", "compress_parameters"}) {
    const absl::Status status = Submit({"--data", data, "--local_steps=5", "--" + flag + "=zstd"});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(Message(status), StartsWith("--" + flag + ": "));
    EXPECT_THAT(Message(status), HasSubstr("zstd"));
    EXPECT_THAT(Message(status), HasSubstr("none, float16, bfloat16 or int8"));
  }
  const absl::Status status = Submit({"--data", data, "--compress_pseudo_gradients=int8"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(Message(status), HasSubstr("--compress_pseudo_gradients: only with --local_steps"));
  EXPECT_TRUE(fake_->calls().upload_dataset.empty());
  EXPECT_TRUE(fake_->calls().submit_job.empty());
}

TEST_F(SubmitCommandTest, EachSubmitGetsItsOwnRequestId) {
  const std::string data = WriteFile("d.txt", "some text");
  ASSERT_TRUE(Submit({"--data", data}).ok());
  ASSERT_TRUE(Submit({"--data", data}).ok());
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.submit_job.size(), 2u);
  EXPECT_NE(calls.submit_job[0].request_id(), calls.submit_job[1].request_id());
  // Without a model anywhere: a fresh model of the default shape.
  EXPECT_TRUE(calls.submit_job[0].spec().model().has_config());
}

TEST_F(SubmitCommandTest, InitUploadsACheckpoint) {
  const std::string data = WriteFile("d2.txt", "text");
  const std::string init = WriteFile("start.safetensors", std::string(100, '\0'));
  ASSERT_TRUE(Submit({"--data", data, "--init", init, "--d_model=48"}).ok());
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.upload_dataset.size(), 2u);
  EXPECT_EQ(calls.upload_dataset[1].metadata.content_type(), "application/x-safetensors");
  EXPECT_EQ(calls.upload_dataset[1].metadata.name(), "start.safetensors");
  const v1::ModelSpec& model = calls.submit_job.at(0).spec().model();
  ASSERT_TRUE(model.has_checkpoint());
  EXPECT_EQ(model.checkpoint().upload_id(), "ds-" + base::Sha256Hex(std::string(100, '\0')).substr(0, 12));
  EXPECT_EQ(model.checkpoint().config().d_model(), 48);
}

TEST_F(SubmitCommandTest, MalformedTextProtoIsAUsageErrorWithLineAndColumn) {
  const std::string spec = WriteFile("bad.textproto", "name: \"x\"\nrounds: many\n");
  const absl::Status status = Submit({spec, "--data", WriteFile("d3.txt", "x")});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), StartsWith(spec + ":2:9: "));
  EXPECT_THAT(Message(status), HasSubstr("many"));
  EXPECT_TRUE(fake_->calls().upload_dataset.empty());
  EXPECT_TRUE(fake_->calls().submit_job.empty());
}

TEST_F(SubmitCommandTest, NothingIsSentWhenAnInputIsMissing) {
  const std::string good = WriteFile("good.txt", "x");
  absl::Status status = Submit({"--data", good + "," + TempPath("missing.txt")});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(status), HasSubstr("missing.txt"));

  status = Submit({TempPath("missing.textproto"), "--data", good});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);

  status = Submit({"--rounds=3"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), StartsWith("no training data: give --data=FILE"));

  status = Submit({"--data", good, "--optimizer=lamb"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--optimizer=lamb: expected adamw or sgd"));

  status = Submit({"--data", good, "--quarantine_after=0"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--quarantine_after=0: expected at least 1"));

  status = Submit({"--data", good, "--init=model.bin"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fake_->calls().upload_dataset.empty());
}

TEST_F(SubmitCommandTest, CoordinatorRefusalKeepsItsCode) {
  fake_->submit_job = [](const v1::SubmitJobRequest&, v1::Job*) {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        "model needs at least 37.5 MiB at C = 1; the largest eligible budget allows 28.8 MiB");
  };
  const absl::Status status = Submit({"--data", WriteFile("d4.txt", "x")});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(status), StartsWith("SubmitJob: model needs at least 37.5 MiB"));
}

TEST_F(SubmitCommandTest, JsonPrintsTheJob) {
  ASSERT_TRUE(Submit({"--data", WriteFile("d5.txt", "x"), "--json"}).ok());
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  EXPECT_EQ(json["job_id"], "job-000001");
  EXPECT_EQ(json["state"], "JOB_STATE_QUEUED");
}

TEST_F(SubmitCommandTest, WatchFollowsTheNewJob) {
  fake_->watch_job = [](const v1::WatchJobRequest& request, int,
                        const FakeCoordinator::Writer<v1::JobEvent>& write) {
    EXPECT_EQ(request.job_id(), "job-000001");
    v1::JobEvent snapshot;
    snapshot.set_sequence(1);
    snapshot.mutable_snapshot()->set_job_id("job-000001");
    snapshot.mutable_snapshot()->set_state(v1::JOB_STATE_SUCCEEDED);
    write(snapshot);
    return grpc::Status::OK;
  };
  const absl::Status status = Submit({"--data", WriteFile("d6.txt", "x"), "--watch"});
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(out_.str(), HasSubstr("submitted job-000001"));
  EXPECT_THAT(out_.str(), HasSubstr("watching job-000001: SUCCEEDED"));
}

TEST_F(SubmitCommandTest, UnreachableCoordinatorNamesIt) {
  std::ostringstream out;
  const absl::Status status =
      RunSubmitCommand({"--data", WriteFile("d7.txt", "x"), "--coordinator=127.0.0.1:1"}, out, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Message(status), HasSubstr("cannot reach the coordinator at 127.0.0.1:1"));
  EXPECT_EQ(out.str(), "");
}

TEST(ReadJobSpecTest, ReadsEveryField) {
  const std::string path = TempPath("full.textproto");
  std::ofstream(path) << "name: \"n\" constraints { min_memory_bytes: 1048576 device_kinds: \"cuda\" }";
  absl::StatusOr<v1::JobSpec> spec = ReadJobSpec(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->constraints().device_kinds(0), "cuda");
}

// Found by fuzz/job_spec_fuzzer.cc: text format takes "\377" into a string
// field, and the coordinator could then not parse the SubmitJob request.
TEST(ReadJobSpecTest, RefusesStringsThatAreNotUtf8) {
  const std::string path = TempPath("latin1.textproto");
  std::ofstream(path) << "name: \"ok\" dataset_ids: \"ds-1\" dataset_ids: \"caf\\351\"";
  const absl::StatusOr<v1::JobSpec> spec = ReadJobSpec(path);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(spec.status()), path + ": dataset_ids[1] is not valid UTF-8");
}

TEST(ReadJobSpecTest, RefusesNumbersThatAreNotFinite) {
  // TextFormat reads them; no setting means NaN, and NaN's sign does not survive printing.
  const std::string path = TempPath("nan.textproto");
  std::ofstream(path) << "rounds: 3 optimizer { sgd { } learning_rate: -nan }";
  const absl::StatusOr<v1::JobSpec> spec = ReadJobSpec(path);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(spec.status()), path + ": optimizer.learning_rate is not a finite number");
}

TEST(ReadJobSpecTest, ADirectoryIsNoSpec) {
  const absl::StatusOr<v1::JobSpec> spec = ReadJobSpec(TempPath(""));
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(spec.status()), HasSubstr("not a regular file"));
}

TEST(RandomRequestIdTest, LooksLikeAVersion4Uuid) {
  const std::string id = RandomRequestId();
  EXPECT_THAT(id, MatchesRegex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"));
  EXPECT_NE(id, RandomRequestId());
}

}  // namespace
}  // namespace slimfit::client
