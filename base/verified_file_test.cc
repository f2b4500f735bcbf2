#include "base/verified_file.h"

#include <gtest/gtest.h>

#include <string>

#include "base/sha256.h"
#include "base/test_util.h"

namespace slimfit::base {
namespace {

constexpr char kContents[] = "the bytes that were written, 48 of them in all..";

FileDigest Recorded() { return {static_cast<int64_t>(sizeof(kContents) - 1), Sha256Hex(kContents)}; }

TEST(VerifiedFileTest, AnUnchangedFileStreamsInOrderAndVerifies) {
  const std::string path = testing_util::WriteTempFile("unchanged", kContents);
  std::string streamed;
  int pieces = 0;
  absl::Status status = StreamVerifiedFile(path, Recorded(), 10, [&](absl::string_view piece) {
    streamed.append(piece.data(), piece.size());
    ++pieces;
    return true;
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(streamed, kContents);
  EXPECT_EQ(pieces, 5);
  EXPECT_TRUE(VerifyFile(path, Recorded()).ok());
  EXPECT_TRUE(VerifyFile(path, {-1, Sha256Hex(kContents)}).ok()) << "size not recorded";
}

TEST(VerifiedFileTest, AFlippedByteIsDataLossNamingTheFileAfterItWasStreamed) {
  std::string changed = kContents;
  changed[20] ^= 0x01;
  const std::string path = testing_util::WriteTempFile("flipped", changed);
  int64_t streamed = 0;
  absl::Status status = StreamVerifiedFile(path, Recorded(), 16, [&](absl::string_view piece) {
    streamed += static_cast<int64_t>(piece.size());
    return true;
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(path), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find(Sha256Hex(kContents)), absl::string_view::npos) << status;
  EXPECT_EQ(streamed, Recorded().bytes);
}

TEST(VerifiedFileTest, ADifferentSizeIsDataLossBeforeAnythingIsPassedOn) {
  const std::string path = testing_util::WriteTempFile("truncated", std::string(kContents).substr(0, 30));
  bool consumed = false;
  absl::Status status = StreamVerifiedFile(path, Recorded(), 16, [&](absl::string_view) {
    consumed = true;
    return true;
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("30 bytes"), absl::string_view::npos) << status;
  EXPECT_FALSE(consumed);
}

TEST(VerifiedFileTest, AMissingFileOrADirectoryIsDataLoss) {
  EXPECT_EQ(VerifyFile(testing_util::TempPath("never-written"), Recorded()).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(VerifyFile(testing_util::TempPath(""), Recorded()).code(), absl::StatusCode::kDataLoss);
}

TEST(VerifiedFileTest, AConsumerThatStopsCancels) {
  const std::string path = testing_util::WriteTempFile("stopped", kContents);
  int pieces = 0;
  absl::Status status = StreamVerifiedFile(path, Recorded(), 8, [&](absl::string_view) {
    ++pieces;
    return false;
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(pieces, 1);
}

}  // namespace
}  // namespace slimfit::base
