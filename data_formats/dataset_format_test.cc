#include "data_formats/dataset_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace slimfit::rpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseDatasetTest, TextWithSeparatorDropsItAndSkipsEmptyDocuments) {
  absl::StatusOr<TokenStream> stream =
      ParseDataset("ab||c||||de", "text/plain", v1::TOKEN_ENCODING_UNSPECIFIED, std::string("||"));
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(std::string(stream->tokens.begin(), stream->tokens.end()), "abcde");
  EXPECT_THAT(stream->doc_starts, ElementsAre(0, 2, 3));
}

TEST(ParseDatasetTest, TokenFilesAreLittleEndian) {
  const std::string bytes("\x01\x01\x02\x00\xff\xff\x03\x00", 8);
  absl::StatusOr<TokenStream> stream = ParseDataset(bytes, "application/x-slimfit-tokens",
                                                    v1::TOKEN_ENCODING_UINT16_LE, std::string("\xff\xff", 2));
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_THAT(stream->tokens, ElementsAre(257, 2, 3));
  EXPECT_THAT(stream->doc_starts, ElementsAre(0, 2));
  EXPECT_THAT(ParseDataset("abc", "application/x-slimfit-tokens", v1::TOKEN_ENCODING_UINT16_LE, std::nullopt)
                  .status()
                  .message(),
              HasSubstr("whole number"));
  EXPECT_FALSE(ParseDataset("abc", "image/png", v1::TOKEN_ENCODING_UNSPECIFIED, std::nullopt).ok());
}

TEST(ParseDatasetTest, SeparatorMustBeWholeTokens) {
  EXPECT_THAT(
      ParseDataset("ab", "application/x-slimfit-tokens", v1::TOKEN_ENCODING_UINT16_LE, std::string("x"))
          .status()
          .message(),
      HasSubstr("document_separator"));
  EXPECT_THAT(ParseDataset("ab", "application/x-slimfit-tokens", v1::TOKEN_ENCODING_UNSPECIFIED, std::nullopt)
                  .status()
                  .message(),
              HasSubstr("token_encoding"));
}

TEST(ParseDatasetFormatTest, TypesAndUnescapedSeparators) {
  absl::StatusOr<DatasetFormat> text = ParseDatasetFormat("TEXT", "\\n\\n");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->content_type, kTextContentType);
  EXPECT_EQ(text->encoding, v1::TOKEN_ENCODING_UNSPECIFIED);
  EXPECT_EQ(text->separator, std::string("\n\n"));
  absl::StatusOr<DatasetFormat> ids = ParseDatasetFormat("uint32", "");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->content_type, kTokensContentType);
  EXPECT_EQ(ids->encoding, v1::TOKEN_ENCODING_UINT32_LE);
  EXPECT_FALSE(ids->separator.has_value());
  EXPECT_THAT(ParseDatasetFormat("csv", "").status().message(), HasSubstr("--data_type=csv: expected text"));
  EXPECT_THAT(ParseDatasetFormat("text", "\\q", "t", "sep").status().message(), HasSubstr("--sep=\\q"));
  EXPECT_THAT(ParseDatasetFormat("text", std::string(65, 'x')).status().message(),
              HasSubstr("expected 1 to 64 bytes, got 65"));
}

v1::LocalDataset Valid() {
  v1::LocalDataset dataset;
  dataset.set_name("notes.v2_final-1");
  dataset.set_tokens(10);
  dataset.set_documents(10);
  dataset.set_sha256(std::string(64, '0'));
  dataset.set_content_type(kTextContentType);
  dataset.set_max_token(255);
  return dataset;
}

TEST(ValidateLocalDatasetsTest, AcceptsWellFormedAnnouncements) {
  google::protobuf::RepeatedPtrField<v1::LocalDataset> datasets;
  EXPECT_TRUE(ValidateLocalDatasets(datasets).ok());
  *datasets.Add() = Valid();
  v1::LocalDataset ids = Valid();
  ids.set_name("ids");
  ids.set_content_type(kTokensContentType);
  ids.set_token_encoding(v1::TOKEN_ENCODING_UINT32_LE);
  ids.set_max_token(int64_t{0xFFFFFFFF});
  *datasets.Add() = ids;
  EXPECT_TRUE(ValidateLocalDatasets(datasets).ok());
}

TEST(ValidateLocalDatasetsTest, EachFieldAtFaultIsNamed) {
  struct Case {
    std::function<void(v1::LocalDataset*)> mutate;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::LocalDataset* d) { d->set_name("a b"); }, "local_datasets[0] (a b): name"},
      {[](v1::LocalDataset* d) { d->set_name(""); }, "name: expected 1 to 256"},
      {[](v1::LocalDataset* d) { d->set_tokens(0); }, "tokens: must be ≥ 1, got 0"},
      {[](v1::LocalDataset* d) { d->set_documents(0); }, "documents: expected 1 to 10 (its tokens), got 0"},
      {[](v1::LocalDataset* d) { d->set_documents(11); }, "got 11"},
      {[](v1::LocalDataset* d) { d->set_sha256("ABC"); }, "sha256: expected 64 lowercase"},
      {[](v1::LocalDataset* d) { d->set_content_type("application/x-safetensors"); },
       "is not a dataset type"},
      {[](v1::LocalDataset* d) { d->set_content_type(kTokensContentType); }, "token_encoding: required"},
      {[](v1::LocalDataset* d) { d->set_max_token(256); }, "max_token: expected 0 to 255, got 256"},
      {[](v1::LocalDataset* d) { d->set_max_token(-1); }, "max_token"},
  };
  for (const Case& c : cases) {
    google::protobuf::RepeatedPtrField<v1::LocalDataset> datasets;
    *datasets.Add() = Valid();
    c.mutate(datasets.Mutable(0));
    absl::Status status = ValidateLocalDatasets(datasets);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
  google::protobuf::RepeatedPtrField<v1::LocalDataset> twice;
  *twice.Add() = Valid();
  *twice.Add() = Valid();
  EXPECT_THAT(ValidateLocalDatasets(twice).message(),
              HasSubstr("local_datasets[1] (notes.v2_final-1): name: given twice"));
  google::protobuf::RepeatedPtrField<v1::LocalDataset> many;
  for (int i = 0; i <= v1::LIMIT_MAX_LOCAL_DATASETS; ++i) {
    v1::LocalDataset d = Valid();
    d.set_name(absl::StrCat("d", i));
    *many.Add() = d;
  }
  EXPECT_THAT(ValidateLocalDatasets(many).message(), HasSubstr("65 entries; at most 64"));
}

TEST(AppendStreamTest, DocumentsStaySeparate) {
  TokenStream stream{{1, 2}, {0}};
  AppendStream(&stream, TokenStream{{3, 4, 5}, {0, 1}});
  EXPECT_THAT(stream.tokens, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(stream.doc_starts, ElementsAre(0, 2, 3));
}

}  // namespace
}  // namespace slimfit::rpc
