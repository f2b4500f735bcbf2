#include "base/process_memory.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

TEST(ProcessMemoryTest, FreedLargeBlocksLeaveTheProcess) {
  if (!ReturnLargeBlocksToTheSystem()) GTEST_SKIP() << "not glibc: the setting does not exist";
  // One 4 MiB block allocated and freed (which, left to itself, glibc takes as the cue to serve
  // blocks that size from the heap), then 40 more, touched, and all but the newest freed. Blocks
  // from the heap would stay resident (the newest pins the heap's top); mappings of their own go.
  constexpr size_t kBlock = size_t{4} << 20;
  char* cue = static_cast<char*>(std::malloc(kBlock));
  ASSERT_NE(cue, nullptr);
  std::memset(cue, 1, kBlock);
  std::free(cue);
  std::vector<char*> blocks;
  for (int i = 0; i < 40; ++i) {
    char* block = static_cast<char*>(std::malloc(kBlock));
    ASSERT_NE(block, nullptr);
    std::memset(block, i + 1, kBlock);
    blocks.push_back(block);
  }
  const int64_t held = ResidentBytes();
  ASSERT_GT(held, 0);
  for (size_t i = 0; i + 1 < blocks.size(); ++i) std::free(blocks[i]);
  const int64_t after = ResidentBytes();
  std::free(blocks.back());
  EXPECT_LT(after, held - 100 * (int64_t{1} << 20))
      << "held " << held << " B, after freeing 156 MiB " << after << " B";
}

TEST(ProcessMemoryTest, ResidentBytesCountsTouchedMemory) {
  const int64_t before = ResidentBytes();
  std::vector<char> touched(size_t{64} << 20, 1);
  EXPECT_GE(ResidentBytes(), before + (int64_t{60} << 20));
  EXPECT_EQ(touched[12345], 1);
}

}  // namespace
}  // namespace slimfit::base
