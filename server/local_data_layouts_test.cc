#include "server/local_data_layouts.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/test_worker_request.h"

namespace slimfit::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::RegisterWorkerRequest Holder(const std::string& name, char digit) {
  v1::RegisterWorkerRequest request = TestWorkerRequest();
  v1::LocalDataset* dataset = request.add_local_datasets();
  dataset->set_name(name);
  dataset->set_sha256(std::string(64, digit));
  dataset->set_tokens(1000);
  dataset->set_documents(3);
  dataset->set_content_type("application/x-slimfit-tokens");
  dataset->set_token_encoding(v1::TOKEN_ENCODING_UINT16_LE);
  dataset->set_max_token(300);
  return request;
}

class LocalDataLayoutsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *StateStore::Open(testing_util::TempPath(
        absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db")));
    registry_ = *WorkerRegistry::Create(store_.get(), RegistryOptions());
  }

  google::protobuf::RepeatedPtrField<std::string> Entries(std::initializer_list<std::string> entries) {
    google::protobuf::RepeatedPtrField<std::string> out;
    for (const std::string& entry : entries) *out.Add() = entry;
    return out;
  }

  std::unique_ptr<StateStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
};

TEST_F(LocalDataLayoutsTest, NamesResolveToTheDigestsWorkersAnnounced) {
  ASSERT_TRUE(registry_->Register(Holder("notes", 'a'), std::nullopt).ok())
      << registry_->Register(Holder("notes", 'a'), std::nullopt).status();
  ASSERT_TRUE(registry_->Register(Holder("mail", 'b'), std::nullopt).ok());
  LocalDataLayouts layouts(store_.get(), registry_.get());
  absl::StatusOr<std::vector<std::string>> digests =
      layouts.Resolve(Entries({"notes", std::string(64, 'b')}));
  ASSERT_TRUE(digests.ok()) << digests.status();
  EXPECT_THAT(*digests, ElementsAre(std::string(64, 'a'), std::string(64, 'b')));

  EXPECT_THAT(layouts.Resolve(Entries({"nope"})).status().message(),
              HasSubstr("spec.local_datasets[0]: no registered worker holds a dataset named 'nope'"));
  EXPECT_THAT(layouts.Resolve(Entries({std::string(64, 'c')})).status().message(),
              HasSubstr("no registered worker holds a dataset with SHA-256 cccc"));
  EXPECT_THAT(layouts.Resolve(Entries({"notes", std::string(64, 'a')})).status().message(),
              HasSubstr("spec.local_datasets[1]: the same dataset as spec.local_datasets[0]"));
  // Two workers announcing different contents under one name: ambiguous.
  ASSERT_TRUE(registry_->Register(Holder("notes", 'd'), std::nullopt).ok());
  EXPECT_THAT(layouts.Resolve(Entries({"notes"})).status().message(),
              HasSubstr("workers hold 2 different datasets named 'notes'"));
}

TEST_F(LocalDataLayoutsTest, AStoredLayoutNeedsNoHolderAndAnUnstoredOneNeedsALiveHolder) {
  LocalDataLayouts layouts(store_.get(), registry_.get());
  const std::string digest(64, 'a');
  // Nothing stored, no worker: refused, naming the entry.
  absl::StatusOr<LocalSource> source = layouts.Source(digest, 128, 256, 2);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(source.status().message(), HasSubstr("spec.local_datasets[2]: no registered worker holds"));

  // A coordinator restarted with the layout stored at submission: no holder needed.
  v1::LocalDataLayout layout;
  layout.set_sha256(digest);
  layout.set_sequence_length(128);
  layout.set_sequences(3);
  layout.add_documents(1);
  layout.add_documents(4);
  layout.add_documents(2);
  ASSERT_TRUE(store_->PutLocalLayout(layout).ok());
  source = layouts.Source(digest, 128, 256, 0);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT(source->documents, ElementsAre(1, 4, 2));
  EXPECT_EQ(source->name, "sha256:aaaaaaaaaaaa");
  // Another L is another layout.
  EXPECT_EQ(layouts.Source(digest, 64, 256, 0).status().code(), absl::StatusCode::kFailedPrecondition);

  // Once its holder is back, its name is used, and its tokens are checked against the vocabulary.
  ASSERT_TRUE(registry_->Register(Holder("notes", 'a'), std::nullopt).ok())
      << registry_->Register(Holder("notes", 'a'), std::nullopt).status();
  source = layouts.Source(digest, 128, 512, 0);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->name, "notes");
  absl::StatusOr<LocalSource> too_wide = layouts.Source(digest, 128, 256, 1);
  EXPECT_EQ(too_wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_wide.status().message(),
              HasSubstr("holds token id 300, outside the model's vocabulary of 256"));
}

}  // namespace
}  // namespace slimfit::server
