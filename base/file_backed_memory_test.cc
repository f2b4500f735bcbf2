#include "base/file_backed_memory.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

TEST(FileBackedMemoryTest, StartsAsZerosAndKeepsWhatIsWrittenAfterItsPagesAreReleased) {
  const int64_t bytes = (int64_t{8} << 20) + 123;  // not a whole number of pages
  absl::StatusOr<std::unique_ptr<FileBackedMemory>> memory =
      FileBackedMemory::Create(::testing::TempDir(), bytes);
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_EQ((*memory)->size(), bytes);
  auto* data = static_cast<unsigned char*>((*memory)->data());
  for (int64_t i = 0; i < bytes; i += 4093) EXPECT_EQ(data[i], 0) << i;
  for (int64_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 7 + 3);

  EXPECT_GE((*memory)->ResidentBytes(), bytes);  // every page was written
  (*memory)->ReleaseResidentPages();
  EXPECT_EQ((*memory)->ResidentBytes(), 0);
  for (int64_t i = 0; i < bytes; ++i) {
    if (data[i] != static_cast<unsigned char>(i * 7 + 3)) FAIL() << "byte " << i << " lost";
  }
  EXPECT_GT((*memory)->ResidentBytes(), 0);  // read back: mapped again

  (*memory)->ReleaseResidentPages();
  if ((*memory)->PrepareForWriting()) {  // a kernel with MADV_POPULATE_WRITE (Linux ≥ 5.14)
    EXPECT_GE((*memory)->ResidentBytes(), bytes);
    EXPECT_EQ(data[bytes - 1], static_cast<unsigned char>((bytes - 1) * 7 + 3));  // contents kept
  }
}

TEST(FileBackedMemoryTest, TwoBlocksAreIndependent) {
  auto a = FileBackedMemory::Create(::testing::TempDir(), 4096);
  auto b = FileBackedMemory::Create(::testing::TempDir(), 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  std::memset((*a)->data(), 1, 4096);
  EXPECT_EQ(static_cast<unsigned char*>((*b)->data())[0], 0);
}

TEST(FileBackedMemoryTest, AMissingDirectoryIsNotFoundAndNamed) {
  auto memory = FileBackedMemory::Create("/nonexistent/slimfit-state", 4096);
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(memory.status().message().find("/nonexistent/slimfit-state"), std::string::npos)
      << memory.status();
}

TEST(FileBackedMemoryTest, ARegularFileIsNotADirectory) {
  const std::string file = ::testing::TempDir() + "/file_backed_memory_test_plain_file";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  auto memory = FileBackedMemory::Create(file, 4096);
  EXPECT_FALSE(memory.ok());
}

TEST(FileBackedMemoryTest, TellsAFileSystemInMemory) {
  EXPECT_FALSE(IsInMemoryFileSystem("/nonexistent/slimfit-state"));
  EXPECT_FALSE(IsInMemoryFileSystem("/proc"));  // procfs: not a place for files, not tmpfs either
  // The file system on top at each mount point: a later line mounts over an earlier one.
  std::map<std::string, std::string> top;
  FILE* mounts = std::fopen("/proc/mounts", "r");
  ASSERT_NE(mounts, nullptr);
  char device[256], mount_point[1024], type[64];
  while (std::fscanf(mounts, "%255s %1023s %63s %*[^\n]", device, mount_point, type) == 3)
    top[mount_point] = type;
  std::fclose(mounts);
  int checked = 0;
  for (const auto& [where, kind] : top) {
    if (kind != "tmpfs" && kind != "ext4" && kind != "xfs") continue;
    // Mount points this process cannot see (another mount namespace's, a sandbox's) or whose
    // names /proc/mounts escapes (\040 for a space) cannot be checked.
    if (where.find('\\') != std::string::npos || access(where.c_str(), F_OK) != 0) continue;
    EXPECT_EQ(IsInMemoryFileSystem(where), kind == "tmpfs") << where << " is " << kind;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no tmpfs, ext4 or xfs mount visible to check against";
}

TEST(FileBackedMemoryTest, NoBytesIsAnError) {
  auto memory = FileBackedMemory::Create(::testing::TempDir(), 0);
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::base
