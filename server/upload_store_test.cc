#include "server/upload_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/sha256.h"
#include "base/test_util.h"

namespace slimfit::server {
namespace {

namespace fs = std::filesystem;

constexpr char kText[] = "a small corpus\n\nof two documents\n";

class UploadStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    root_ = testing_util::TempPath(absl::StrCat("upload_store_", name));
    fs::remove_all(root_);
    uploads_ = absl::StrCat(root_, "/uploads");
    fs::create_directories(uploads_);
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(absl::StrCat(root_, "/state.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    uploads_store_ = std::make_unique<UploadStore>(store_.get(), uploads_, /*limit_bytes=*/1 << 20);
  }

  static v1::UploadMetadata Metadata(const std::string& bytes) {
    v1::UploadMetadata metadata;
    metadata.set_name("corpus.txt");
    metadata.set_content_type("text/plain");
    metadata.set_total_bytes(static_cast<int64_t>(bytes.size()));
    metadata.set_sha256(base::Sha256Hex(bytes));
    metadata.set_document_separator("\n\n");
    return metadata;
  }

  std::unique_ptr<UploadSink> Begin(const v1::UploadMetadata& metadata) {
    std::optional<v1::DatasetInfo> existing;
    absl::StatusOr<std::unique_ptr<UploadSink>> sink = uploads_store_->BeginUpload(metadata, &existing);
    EXPECT_TRUE(sink.ok()) << sink.status();
    EXPECT_FALSE(existing.has_value());
    return sink.ok() ? *std::move(sink) : nullptr;
  }

  // Uploads `bytes` in chunks of at most `chunk` bytes, as `metadata` declares them.
  absl::StatusOr<v1::DatasetInfo> Upload(const v1::UploadMetadata& metadata, const std::string& bytes,
                                         size_t chunk = 8) {
    std::unique_ptr<UploadSink> sink = Begin(metadata);
    if (sink == nullptr) return absl::InternalError("no sink");
    for (size_t at = 0; at < bytes.size(); at += chunk) {
      if (absl::Status written = sink->Write(bytes.substr(at, chunk)); !written.ok()) return written;
    }
    return sink->Finish();
  }

  // The names in the uploads directory: stored files and any temporary one left behind.
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(uploads_, error)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  std::string root_;
  std::string uploads_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<UploadStore> uploads_store_;
};

TEST_F(UploadStoreTest, AFinishedUploadIsStoredRecordedAndDurable) {
  absl::StatusOr<v1::DatasetInfo> info = Upload(Metadata(kText), kText);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->total_bytes(), static_cast<int64_t>(sizeof(kText) - 1));
  EXPECT_EQ(info->documents(), 2);
  EXPECT_FALSE(info->already_existed());
  absl::StatusOr<std::optional<DatasetRecord>> record = store_->GetDataset(info->dataset_id());
  ASSERT_TRUE(record.ok() && record->has_value()) << record.status();
  absl::StatusOr<std::string> stored = base::ReadFileToString((*record)->path);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, kText);
  EXPECT_EQ(Files(), std::vector<std::string>{info->dataset_id()}) << "no temporary file is left";
}

TEST_F(UploadStoreTest, AnIdenticalUploadIsDeduplicated) {
  absl::StatusOr<v1::DatasetInfo> first = Upload(Metadata(kText), kText);
  ASSERT_TRUE(first.ok()) << first.status();
  std::optional<v1::DatasetInfo> existing;
  absl::StatusOr<std::unique_ptr<UploadSink>> again = uploads_store_->BeginUpload(Metadata(kText), &existing);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, nullptr) << "nothing to send";
  ASSERT_TRUE(existing.has_value());
  EXPECT_TRUE(existing->already_existed());
  EXPECT_EQ(existing->dataset_id(), first->dataset_id());
  // Another separator makes another dataset of the same bytes.
  v1::UploadMetadata separated = Metadata(kText);
  separated.set_document_separator("\n");
  existing.reset();
  absl::StatusOr<std::unique_ptr<UploadSink>> other = uploads_store_->BeginUpload(separated, &existing);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(*other, nullptr);
  EXPECT_FALSE(existing.has_value());
}

TEST_F(UploadStoreTest, AnInterruptedUploadLeavesNothingAndCanBeSentAgain) {
  {
    std::unique_ptr<UploadSink> sink = Begin(Metadata(kText));
    ASSERT_NE(sink, nullptr);
    ASSERT_TRUE(sink->Write(std::string(kText).substr(0, 10)).ok());
    EXPECT_EQ(Files().size(), 1u) << "the temporary file";
  }  // the client went away
  EXPECT_TRUE(Files().empty());
  absl::StatusOr<v1::DatasetInfo> resumed = Upload(Metadata(kText), kText, 5);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_FALSE(resumed->already_existed());
  EXPECT_EQ(Files().size(), 1u);
}

TEST_F(UploadStoreTest, AShaMismatchIsDataLossAndStoresNothing) {
  v1::UploadMetadata metadata = Metadata(kText);
  std::string changed = kText;
  changed[3] ^= 0x20;
  absl::StatusOr<v1::DatasetInfo> info = Upload(metadata, changed);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss) << info.status();
  EXPECT_NE(info.status().message().find(metadata.sha256()), absl::string_view::npos) << info.status();
  EXPECT_TRUE(Files().empty());
  std::optional<v1::DatasetInfo> existing;
  absl::StatusOr<std::unique_ptr<UploadSink>> again = uploads_store_->BeginUpload(metadata, &existing);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(*again, nullptr) << "not recorded: the same upload starts afresh";
  EXPECT_FALSE(existing.has_value());
}

TEST_F(UploadStoreTest, ASizeMismatchIsInvalidArgument) {
  const std::string text = kText;
  // Fewer bytes than declared: at Finish.
  v1::UploadMetadata longer = Metadata(text);
  longer.set_total_bytes(longer.total_bytes() + 1);
  absl::StatusOr<v1::DatasetInfo> short_upload = Upload(longer, text);
  EXPECT_EQ(short_upload.status().code(), absl::StatusCode::kInvalidArgument) << short_upload.status();
  EXPECT_NE(short_upload.status().message().find("metadata.total_bytes"), absl::string_view::npos);
  // More bytes than declared: at the chunk that goes over.
  v1::UploadMetadata shorter = Metadata(text);
  shorter.set_total_bytes(shorter.total_bytes() - 1);
  absl::StatusOr<v1::DatasetInfo> long_upload = Upload(shorter, text);
  EXPECT_EQ(long_upload.status().code(), absl::StatusCode::kInvalidArgument) << long_upload.status();
  EXPECT_NE(long_upload.status().message().find("declared total_bytes"), absl::string_view::npos);
  EXPECT_TRUE(Files().empty());
}

// Root ignores permission bits, so the disk errors here are structural: a directory that is gone
// or is a file.
TEST_F(UploadStoreTest, AnUploadsDirectoryThatIsAFileIsInternalNamingThePath) {
  fs::remove_all(uploads_);
  ASSERT_TRUE(base::WriteFileAtomically(uploads_, "not a directory").ok());
  std::optional<v1::DatasetInfo> existing;
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = uploads_store_->BeginUpload(Metadata(kText), &existing);
  EXPECT_EQ(sink.status().code(), absl::StatusCode::kInternal) << sink.status();
  EXPECT_NE(sink.status().message().find(uploads_), absl::string_view::npos) << sink.status();
}

// A checkpoint upload (nothing to parse): the failed rename itself must be the error.
TEST_F(UploadStoreTest, AnUploadsDirectoryRemovedMidUploadFailsAtFinishAndRecordsNothing) {
  const std::string bytes = "not really safetensors, but nothing parses a checkpoint upload";
  v1::UploadMetadata metadata;
  metadata.set_name("model.safetensors");
  metadata.set_content_type("application/x-safetensors");
  metadata.set_total_bytes(static_cast<int64_t>(bytes.size()));
  metadata.set_sha256(base::Sha256Hex(bytes));
  std::unique_ptr<UploadSink> sink = Begin(metadata);
  ASSERT_NE(sink, nullptr);
  ASSERT_TRUE(sink->Write(bytes).ok());
  fs::remove_all(uploads_);
  absl::StatusOr<v1::DatasetInfo> info = sink->Finish();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInternal) << info.status();
  EXPECT_NE(info.status().message().find(uploads_), absl::string_view::npos) << info.status();
  EXPECT_EQ(sink->Finish().status().code(), absl::StatusCode::kFailedPrecondition) << "spent";
  // The directory back: nothing was recorded, so the same upload is accepted afresh.
  fs::create_directories(uploads_);
  absl::StatusOr<v1::DatasetInfo> again = Upload(metadata, bytes);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->already_existed());
  EXPECT_EQ(Files(), std::vector<std::string>{again->dataset_id() + ".safetensors"});
}

TEST_F(UploadStoreTest, ADatasetThatDoesNotParseIsNotKept) {
  const std::string one_token = "a";
  absl::StatusOr<v1::DatasetInfo> info = Upload(Metadata(one_token), one_token);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument) << info.status();
  EXPECT_TRUE(Files().empty());
}

}  // namespace
}  // namespace slimfit::server
