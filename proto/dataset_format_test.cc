#include "proto/dataset_format.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace slimfit::rpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseDatasetTest, TextWithSeparatorDropsItAndSkipsEmptyDocuments) {
  absl::StatusOr<TokenStream> stream = ParseDataset("ab||c||||de", "text/plain", v1::TOKEN_ENCODING_UNSPECIFIED,
                                                    std::string("||"));
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(std::string(stream->tokens.begin(), stream->tokens.end()), "abcde");
  EXPECT_THAT(stream->doc_starts, ElementsAre(0, 2, 3));
}

TEST(ParseDatasetTest, TokenFilesAreLittleEndian) {
  const std::string bytes("\x01\x01\x02\x00\xff\xff\x03\x00", 8);
  absl::StatusOr<TokenStream> stream =
      ParseDataset(bytes, "application/x-slimfit-tokens", v1::TOKEN_ENCODING_UINT16_LE, std::string("\xff\xff", 2));
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
  EXPECT_THAT(ParseDataset("ab", "application/x-slimfit-tokens", v1::TOKEN_ENCODING_UINT16_LE, std::string("x"))
                  .status()
                  .message(),
              HasSubstr("document_separator"));
  EXPECT_THAT(ParseDataset("ab", "application/x-slimfit-tokens", v1::TOKEN_ENCODING_UNSPECIFIED, std::nullopt)
                  .status()
                  .message(),
              HasSubstr("token_encoding"));
}

TEST(AppendStreamTest, DocumentsStaySeparate) {
  TokenStream stream{{1, 2}, {0}};
  AppendStream(&stream, TokenStream{{3, 4, 5}, {0, 1}});
  EXPECT_THAT(stream.tokens, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(stream.doc_starts, ElementsAre(0, 2, 3));
}

}  // namespace
}  // namespace slimfit::rpc
