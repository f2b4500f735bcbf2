#include "data_formats/token_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace slimfit::rpc {
namespace {

using ::testing::HasSubstr;

TEST(TokenCodecTest, NarrowestEncodingHoldsTheVocabulary) {
  EXPECT_EQ(NarrowestTokenEncoding(256), v1::TOKEN_ENCODING_UINT8);
  EXPECT_EQ(NarrowestTokenEncoding(257), v1::TOKEN_ENCODING_UINT16_LE);
  EXPECT_EQ(NarrowestTokenEncoding(65536), v1::TOKEN_ENCODING_UINT16_LE);
  EXPECT_EQ(NarrowestTokenEncoding(65537), v1::TOKEN_ENCODING_UINT32_LE);
}

TEST(TokenCodecTest, RoundTripsLittleEndian) {
  const std::vector<int64_t> ids = {0, 1, 255, 256, 65535};
  absl::StatusOr<std::string> bytes = EncodeTokens(ids, v1::TOKEN_ENCODING_UINT16_LE);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_EQ(bytes->size(), 10u);
  EXPECT_EQ(static_cast<unsigned char>((*bytes)[6]), 0x00);  // 256 = 0x0100, low byte first
  EXPECT_EQ(static_cast<unsigned char>((*bytes)[7]), 0x01);
  absl::StatusOr<std::vector<int64_t>> back =
      DecodeTokens(*bytes, v1::TOKEN_ENCODING_UINT16_LE, 65536, "tokens");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, ids);
}

TEST(TokenCodecTest, RejectsBadInputWithThePlace) {
  EXPECT_THAT(EncodeTokens({3, 300}, v1::TOKEN_ENCODING_UINT8).status().message(),
              HasSubstr("token 1 = 300"));
  EXPECT_THAT(DecodeTokens("abc", v1::TOKEN_ENCODING_UINT16_LE, 1000, "tokens").status().message(),
              HasSubstr("not a whole number"));
  EXPECT_THAT(DecodeTokens("a\xff", v1::TOKEN_ENCODING_UINT8, 200, "tokens").status().message(),
              HasSubstr("tokens: token 1 = 255 is outside the vocabulary of 200"));
  EXPECT_EQ(DecodeTokens("a", v1::TOKEN_ENCODING_UNSPECIFIED, 256, "t").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::rpc
