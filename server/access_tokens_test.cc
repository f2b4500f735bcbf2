#include "server/access_tokens.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/files.h"
#include "base/test_util.h"

namespace slimfit::server {
namespace {

TEST(AccessTokensTest, FlagAndFileTokensAndRotationByReload) {
  const std::string file = testing_util::WriteTempFile("client-tokens", "old-token-1\n");
  absl::StatusOr<std::unique_ptr<AccessTokens>> tokens = AccessTokens::Create("client", "flag-token-0", file);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_TRUE((*tokens)->Accepts("flag-token-0"));
  EXPECT_TRUE((*tokens)->Accepts("old-token-1"));
  EXPECT_FALSE((*tokens)->Accepts("new-token-2"));
  // Rotation: the new token added, then the old one removed.
  ASSERT_TRUE(base::WriteFileAtomically(file, "old-token-1\nnew-token-2\n").ok());
  ASSERT_TRUE((*tokens)->Reload().ok());
  EXPECT_TRUE((*tokens)->Accepts("new-token-2"));
  ASSERT_TRUE(base::WriteFileAtomically(file, "new-token-2\n").ok());
  ASSERT_TRUE((*tokens)->Reload().ok());
  EXPECT_FALSE((*tokens)->Accepts("old-token-1"));
  EXPECT_TRUE((*tokens)->Accepts("new-token-2"));
  EXPECT_EQ((*tokens)->size(), 2u);
  // A broken file keeps what was accepted.
  ASSERT_TRUE(base::WriteFileAtomically(file, "# emptied by mistake\n").ok());
  EXPECT_EQ((*tokens)->Reload().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*tokens)->Accepts("new-token-2"));
}

TEST(AccessTokensTest, NeedsSomeToken) {
  EXPECT_EQ(AccessTokens::Create("client", "", "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AccessTokens::Create("client", "", testing_util::TempPath("none")).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace slimfit::server
