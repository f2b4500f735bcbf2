#include "base/secrets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "base/files.h"
#include "base/test_util.h"

namespace slimfit::base {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(SecretsTest, RandomSecretsAreLongHexAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string secret = RandomSecret("wc-");
    ASSERT_EQ(secret.size(), 3u + 64u);
    EXPECT_EQ(secret.substr(0, 3), "wc-");
    EXPECT_EQ(secret.find_first_not_of("0123456789abcdef", 3), std::string::npos);
    seen.insert(secret);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(SecretsTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
}

TEST(SecretsTest, TokenFilesSkipCommentsAndNameTheBadLine) {
  const std::string path =
      testing_util::WriteTempFile("tokens", "# rotated 2026-11\n\n  first-token-1  \nsecond-token-2\n");
  absl::StatusOr<std::vector<std::string>> tokens = ReadTokenFile(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(*tokens, ElementsAre("first-token-1", "second-token-2"));

  absl::Status short_token =
      ReadTokenFile(testing_util::WriteTempFile("short", "ok-token-1\nabc\n")).status();
  EXPECT_EQ(short_token.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(short_token.message()), HasSubstr(":2:"));
  EXPECT_THAT(std::string(short_token.message()), Not(HasSubstr("ok-token-1")));
  EXPECT_EQ(ReadTokenFile(testing_util::WriteTempFile("spaces", "two words-here\n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile(testing_util::WriteTempFile("empty", "# nothing\n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile(testing_util::TempPath("missing")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace slimfit::base
