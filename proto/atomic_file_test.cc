#include "proto/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace slimfit {
namespace {

using ::testing::HasSubstr;
using testing_util::ReadFileToString;
using testing_util::TempPath;

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

}  // namespace
}  // namespace slimfit
