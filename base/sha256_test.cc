#include "base/sha256.h"

#include <gtest/gtest.h>

namespace slimfit::base {
namespace {

TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256Hasher pieces;
  pieces.Update("a");
  pieces.Update("bc");
  EXPECT_EQ(pieces.FinishHex(), Sha256Hex("abc"));
}

TEST(Sha256Test, IsSha256Hex) {
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Hex("ABC"));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'g')));
}

TEST(Sha256Test, MissingFileIsNotFound) {
  EXPECT_EQ(Sha256OfFile("/nonexistent/file").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace slimfit::base
