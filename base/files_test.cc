#include "base/files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "base/test_util.h"

namespace slimfit::base {
namespace {

using ::testing::HasSubstr;
using testing_util::TempPath;

// The names in `dir`, to see that no temporary file was left behind.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename());
  return names;
}

TEST(WriteFileAtomicallyTest, ReplacesAndReportsMissingDirectory) {
  const std::string path = TempPath("atomic.txt");
  ASSERT_TRUE(WriteFileAtomically(path, "one").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "two").ok());
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  ASSERT_TRUE(contents.ok());
  EXPECT_EQ(*contents, "two");
  absl::Status missing = WriteFileAtomically(TempPath("no/such/dir/file"), "x");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("no/such/dir/file"));
}

TEST(AtomicFileWriterTest, NothingAppearsBeforeCommit) {
  const std::string dir = TempPath("writer_commit");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.bin";
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(writer->Append("head").ok());
  ASSERT_TRUE(writer->Append(std::string(200000, 'x')).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_TRUE(writer->Commit().ok());
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_EQ(contents->size(), 4u + 200000u);
  EXPECT_EQ(contents->substr(0, 5), "headx");
  EXPECT_THAT(Entries(dir), ::testing::ElementsAre("model.bin"));
  EXPECT_EQ(writer->Commit().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AtomicFileWriterTest, AnUncommittedWriterLeavesNothingAndTheOldFileStays) {
  const std::string dir = TempPath("writer_abandon");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->Append("new").ok());
    AtomicFileWriter moved = *std::move(writer);  // the moved-from writer owns nothing
  }
  EXPECT_THAT(Entries(dir), ::testing::ElementsAre("model.bin"));
  EXPECT_EQ(*ReadFileToString(path), "old");
}

TEST(ReadFileToStringTest, ErrorsNameThePath) {
  const std::string missing = TempPath("no_such_file");
  absl::StatusOr<std::string> read = ReadFileToString(missing);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr(missing));
  read = ReadFileToString(TempPath(""));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("not a regular file"));
}

TEST(ReadFileToStringTest, ReadsBytesAsTheyAre) {
  const std::string path = TempPath("binary.bin");
  const std::string bytes("a\0b\r\n\xff", 6);
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, bytes);
}

}  // namespace
}  // namespace slimfit::base
