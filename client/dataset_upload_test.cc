#include "client/dataset_upload.h"

#include <fstream>
#include <string>

#include "base/sha256.h"
#include "base/test_util.h"
#include "client/coordinator_client.h"
#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::client {
namespace {

using ::slimfit::testing_util::TempPath;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Le;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

std::string WriteFile(const std::string& name, const std::string& contents) {
  return testing_util::WriteTempFile(name, contents);
}

// Deterministic bytes that are not all alike, so that chunk order matters.
std::string Pattern(size_t size) {
  std::string bytes(size, '\0');
  uint32_t state = 12345;
  for (char& c : bytes) {
    state = state * 1103515245u + 12345u;
    c = static_cast<char>(state >> 24);
  }
  return bytes;
}

class DatasetUploadTest : public ::testing::Test {
 protected:
  DatasetUploadTest() : fake_(FakeCoordinator::Start()) {
    CoordinatorOptions options;
    options.coordinator = fake_->address();
    options.token = "tok";
    client_ = *CoordinatorClient::Create(options);
  }

  std::unique_ptr<FakeCoordinator> fake_;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(DatasetUploadTest, SendsMetadataThenTheBytes) {
  const std::string contents = "first document\n\nsecond document\n";
  const std::string path = WriteFile("corpus.txt", contents);
  absl::StatusOr<UploadSource> source = DatasetSource(path, "text", "\\n\\n");
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<v1::DatasetInfo> info = UploadFile(*client_, *source);
  ASSERT_TRUE(info.ok()) << info.status();

  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.upload_dataset.size(), 1u);
  const ReceivedUpload& upload = calls.upload_dataset[0];
  EXPECT_TRUE(upload.metadata_first);
  EXPECT_EQ(upload.metadata.name(), "corpus.txt");
  EXPECT_EQ(upload.metadata.content_type(), "text/plain");
  EXPECT_EQ(upload.metadata.total_bytes(), static_cast<int64_t>(contents.size()));
  EXPECT_EQ(upload.metadata.sha256(), base::Sha256Hex(contents));
  EXPECT_EQ(upload.metadata.token_encoding(), v1::TOKEN_ENCODING_UNSPECIFIED);
  ASSERT_TRUE(upload.metadata.has_document_separator());
  EXPECT_EQ(upload.metadata.document_separator(), "\n\n");
  EXPECT_THAT(upload.chunk_sizes, ElementsAre(contents.size()));
  EXPECT_EQ(upload.content, contents);
  EXPECT_THAT(calls.authorizations, ElementsAre("Bearer tok"));
  EXPECT_EQ(info->dataset_id(), "ds-" + base::Sha256Hex(contents).substr(0, 12));
}

TEST_F(DatasetUploadTest, ChunksALargeFileAtOneMebibyte) {
  const size_t kMiB = v1::LIMIT_MAX_CHUNK_BYTES;
  const std::string contents = Pattern(2 * kMiB + kMiB / 2 + 7);
  const std::string path = WriteFile("big.bin", contents);
  absl::StatusOr<v1::DatasetInfo> info = UploadFile(*client_, *DatasetSource(path, "uint16", ""));
  ASSERT_TRUE(info.ok()) << info.status();
  const ReceivedUpload upload = fake_->calls().upload_dataset.at(0);
  EXPECT_THAT(upload.chunk_sizes, ElementsAre(kMiB, kMiB, kMiB / 2 + 7));
  EXPECT_THAT(upload.chunk_sizes, Each(Le(kMiB)));
  EXPECT_EQ(upload.content, contents);
  EXPECT_EQ(upload.metadata.total_bytes(), static_cast<int64_t>(contents.size()));
  EXPECT_EQ(upload.metadata.sha256(), base::Sha256Hex(contents));
  EXPECT_EQ(upload.metadata.content_type(), "application/x-slimfit-tokens");
  EXPECT_EQ(upload.metadata.token_encoding(), v1::TOKEN_ENCODING_UINT16_LE);
  EXPECT_FALSE(upload.metadata.has_document_separator());
}

TEST_F(DatasetUploadTest, StopsWritingWhenTheCoordinatorAnswersEarly) {
  fake_->upload_answers_after_metadata = true;
  fake_->upload_dataset = [](const ReceivedUpload& upload, v1::DatasetInfo* info) {
    info->set_dataset_id("ds-known");
    info->set_already_existed(true);
    info->set_total_bytes(upload.metadata.total_bytes());
    return grpc::Status::OK;
  };
  const std::string path = WriteFile("known.txt", Pattern(3 * v1::LIMIT_MAX_CHUNK_BYTES));
  absl::StatusOr<v1::DatasetInfo> info = UploadFile(*client_, *DatasetSource(path, "text", ""));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->dataset_id(), "ds-known");
  EXPECT_TRUE(info->already_existed());
}

TEST_F(DatasetUploadTest, CoordinatorErrorsKeepTheirCodeAndNameTheFile) {
  fake_->upload_dataset = [](const ReceivedUpload&, v1::DatasetInfo*) {
    return grpc::Status(grpc::StatusCode::DATA_LOSS, "SHA-256 of the received bytes differs");
  };
  const std::string path = WriteFile("lossy.txt", "abc");
  absl::StatusOr<v1::DatasetInfo> info = UploadFile(*client_, *DatasetSource(path, "text", ""));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Message(info.status()),
            "uploading " + path + ": UploadDataset: SHA-256 of the received bytes differs");
}

TEST_F(DatasetUploadTest, LocalProblemsSendNothing) {
  absl::StatusOr<v1::DatasetInfo> info =
      UploadFile(*client_, *DatasetSource(TempPath("no-such-file.txt"), "text", ""));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(info.status()), HasSubstr("no-such-file.txt"));

  info = UploadFile(*client_, *DatasetSource(WriteFile("empty.txt", ""), "text", ""));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(info.status()), HasSubstr("empty.txt: the file is empty"));
  EXPECT_TRUE(fake_->calls().upload_dataset.empty());
}

TEST(DatasetSourceTest, TypesAndSeparators) {
  absl::StatusOr<UploadSource> source = DatasetSource("a", "uint32", "\\x1e");
  ASSERT_TRUE(source.ok());
  EXPECT_EQ(source->token_encoding, v1::TOKEN_ENCODING_UINT32_LE);
  EXPECT_EQ(*source->document_separator, "\x1e");
  EXPECT_EQ(DatasetSource("a", "uint8", "")->token_encoding, v1::TOKEN_ENCODING_UINT8);
  EXPECT_EQ(DatasetSource("a", "TEXT", "\\t")->document_separator, "\t");

  EXPECT_THAT(Message(DatasetSource("a", "float", "").status()),
              StartsWith("--data_type=float: expected text"));
  EXPECT_THAT(Message(DatasetSource("a", "text", "\\q").status()), StartsWith("--separator=\\q: "));
  EXPECT_THAT(Message(DatasetSource("a", "text", std::string(65, 'x')).status()),
              HasSubstr("expected 1 to 64 bytes"));
}

TEST(CheckpointSourceTest, ByExtension) {
  EXPECT_EQ(CheckpointSource("m.safetensors")->content_type, "application/x-safetensors");
  EXPECT_EQ(CheckpointSource("dir/M.PT")->content_type, "application/x-pytorch");
  EXPECT_EQ(CheckpointSource("m.pth")->content_type, "application/x-pytorch");
  const absl::Status refused = CheckpointSource("m.bin").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(refused), StartsWith("--init=m.bin: expected a .safetensors"));
}

}  // namespace
}  // namespace slimfit::client
