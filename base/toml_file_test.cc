#include "base/toml_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/test_util.h"

namespace slimfit::base {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(ReadFlatTomlTest, EveryValueKindAsFlagTextInFileOrder) {
  const std::string path = testing_util::WriteTempFile("daemon.toml",
                                                       "# a daemon\n"
                                                       "state_dir = \"/var/lib/slimfit\"\n"
                                                       "lost_after_ms = 5000\n"
                                                       "insecure = false\n"
                                                       "fraction = 0.1\n"
                                                       "data = [\"a.txt\", \"b.txt\"]\n"
                                                       "budget = '2GiB'\n");
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> read = ReadFlatToml(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair("state_dir", "/var/lib/slimfit"), Pair("lost_after_ms", "5000"),
                                 Pair("insecure", "false"), Pair("fraction", "0.1"),
                                 Pair("data", "a.txt,b.txt"), Pair("budget", "2GiB")));
}

TEST(ReadFlatTomlTest, SyntaxErrorsNameTheLineAndColumn) {
  const std::string path = testing_util::WriteTempFile("broken.toml", "listen = \"a\"\nthreads = = 2\n");
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> read = ReadFlatToml(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path + ":2:"));
}

TEST(ReadFlatTomlTest, TablesDatesAndMixedListsAreRefusedNamingTheKey) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {Case{"[server]\nlisten = \"x\"\n", "server: tables are not flags"},
                        Case{"when = 1979-05-27\n", "when: expected a string, number"},
                        Case{"data = [\"a\", 2]\n", "data: a list holds strings only"}}) {
    const std::string path = testing_util::WriteTempFile("refused.toml", c.text);
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> read = ReadFlatToml(path);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(c.message)) << c.text;
  }
}

TEST(ReadFlatTomlTest, AMissingFileIsNotFound) {
  EXPECT_EQ(ReadFlatToml(testing_util::TempPath("absent.toml")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace slimfit::base
