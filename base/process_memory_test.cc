#include "base/process_memory.h"

#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
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
  EXPECT_LT(after, held - 100 * (int64_t{1} << 20)) << "held " << held << " B, after freeing 156 MiB " << after << " B";
}

TEST(ProcessMemoryTest, ResidentBytesCountsTouchedMemory) {
  const int64_t before = ResidentBytes();
  std::vector<char> touched(size_t{64} << 20, 1);
  EXPECT_GE(ResidentBytes(), before + (int64_t{60} << 20));
  EXPECT_EQ(touched[12345], 1);
}

// A thread's freed memory serves the next thread's allocations, even while the first thread lives
// (as gRPC's pool threads, each running a shard, do): one heap for every thread. In a child
// process, before it starts threads: the setting is process-wide, and this binary's other tests
// change the allocator too.
TEST(ProcessMemoryTest, RetainedMemoryServesEveryThread) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "not glibc: the settings do not exist";
#else
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RetainFreedHeapMemory();
    constexpr size_t kBlock = size_t{1} << 20;
    constexpr int kBlocks = 200;
    auto churn = [] {
      std::vector<char*> blocks;
      for (int i = 0; i < kBlocks; ++i) {
        char* block = static_cast<char*>(std::malloc(kBlock));
        if (block == nullptr) _exit(3);
        std::memset(block, i + 1, kBlock);
        blocks.push_back(block);
      }
      for (char* block : blocks) std::free(block);
    };
    std::mutex mutex;
    std::condition_variable changed;
    bool first_done = false, second_done = false;
    std::thread first([&] {
      churn();
      std::unique_lock<std::mutex> lock(mutex);
      first_done = true;
      changed.notify_all();
      changed.wait(lock, [&] { return second_done; });  // alive while the second allocates
    });
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return first_done; });
    }
    const int64_t before = ResidentBytes();
    std::thread second(churn);
    second.join();
    const int64_t growth = ResidentBytes() - before;
    {
      std::lock_guard<std::mutex> lock(mutex);
      second_done = true;
      changed.notify_all();
    }
    first.join();
    // 200 MiB were churned; a second arena would keep at least one 64 MiB heap of its own.
    _exit(before > 0 && growth < (int64_t{16} << 20) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the second thread's 200 MiB did not reuse the first's freed memory";
#endif
}

}  // namespace
}  // namespace slimfit::base
