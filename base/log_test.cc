#include "base/log.h"

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

using ::testing::MatchesRegex;

TEST(LogTest, OneLinePerCallWithTimeComponentAndLevel) {
  SetLogComponent("worker w-1");
  ::testing::internal::CaptureStderr();
  LogInfo("round ", 3, " done");
  LogWarning("slow");
  LogError("broken");
  const std::string text = ::testing::internal::GetCapturedStderr();
  const std::string time = "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z";
  EXPECT_THAT(text, MatchesRegex(time + " worker w-1 I round 3 done\n" + time + " worker w-1 W slow\n" +
                                 time + " worker w-1 E broken\n"));
}

TEST(LogTest, LinesFromManyThreadsNeverInterleave) {
  SetLogComponent("t");
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 50; ++i) LogInfo(std::string(200, static_cast<char>('a' + t)));
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string text = ::testing::internal::GetCapturedStderr();
  int lines = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    ASSERT_NE(end, std::string::npos);
    const std::string line = text.substr(start, end - start);
    const std::string payload = line.substr(line.size() - 200);
    EXPECT_EQ(payload, std::string(200, payload[0])) << line;
    ++lines;
    start = end + 1;
  }
  EXPECT_EQ(lines, 200);
}

}  // namespace
}  // namespace slimfit::base
