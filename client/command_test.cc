#include "client/command.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::client {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Two commands that record what they were given.
class RunCliTest : public ::testing::Test {
 protected:
  RunCliTest() {
    commands_.push_back(
        {"echo", "prints its arguments", [this](absl::Span<const std::string> args, std::ostream& out) {
           received_.assign(args.begin(), args.end());
           if (!args.empty() && args[0] == "--help") {
             out << "echo help\n";
             return absl::OkStatus();
           }
           for (const std::string& arg : args) out << arg << "\n";
           return absl::OkStatus();
         }});
    commands_.push_back({"fail", "always fails", [](absl::Span<const std::string>, std::ostream& out) {
                           out << "partial output";
                           return absl::ResourceExhaustedError("nothing fits\nat all");
                         }});
    Command stream{"stream", "writes as it goes, then fails",
                   [](absl::Span<const std::string>, std::ostream& out) {
                     out << "event 1\n";
                     return absl::CancelledError("job-1 CANCELLED: by hand");
                   }};
    stream.streams_output = true;
    commands_.push_back(stream);
  }

  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    return RunCli(args, commands_, out_, err_);
  }

  std::vector<Command> commands_;
  std::vector<std::string> received_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(RunCliTest, DispatchesWithTheCommandWordRemoved) {
  EXPECT_EQ(Run({"echo", "--a=1", "--b"}), base::kExitOk);
  EXPECT_EQ(received_, (std::vector<std::string>{"--a=1", "--b"}));
  EXPECT_EQ(out_.str(), "--a=1\n--b\n");
  EXPECT_EQ(err_.str(), "");
}

TEST_F(RunCliTest, FailureDiscardsOutputAndPrintsOneLine) {
  EXPECT_EQ(Run({"fail"}), base::kExitFailure);
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(err_.str(), "slimfit: nothing fits at all\n");
}

TEST_F(RunCliTest, StreamingCommandKeepsWhatItWroteBeforeAnError) {
  EXPECT_EQ(Run({"stream"}), base::kExitFailure);
  EXPECT_EQ(out_.str(), "event 1\n");
  EXPECT_EQ(err_.str(), "slimfit: job-1 CANCELLED: by hand\n");
}

TEST_F(RunCliTest, NoCommandIsAUsageError) {
  EXPECT_EQ(Run({}), base::kExitUsage);
  EXPECT_THAT(err_.str(), StartsWith("slimfit: no command given"));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(RunCliTest, UnknownCommandIsAUsageError) {
  EXPECT_EQ(Run({"frobnicate", "--x"}), base::kExitUsage);
  EXPECT_EQ(err_.str(),
            "slimfit: unknown command 'frobnicate'; run 'slimfit help' for the list of commands\n");
}

TEST_F(RunCliTest, HelpListsCommands) {
  for (const char* word : {"help", "--help", "-h"}) {
    EXPECT_EQ(Run({word}), base::kExitOk) << word;
    EXPECT_THAT(out_.str(), StartsWith("usage: slimfit <command> [flags]")) << word;
    EXPECT_THAT(out_.str(), HasSubstr("  echo         prints its arguments\n")) << word;
    EXPECT_THAT(out_.str(), HasSubstr("  fail         always fails\n")) << word;
    EXPECT_EQ(err_.str(), "") << word;
  }
}

TEST_F(RunCliTest, HelpForACommandRunsItsHelp) {
  EXPECT_EQ(Run({"help", "echo"}), base::kExitOk);
  EXPECT_EQ(out_.str(), "echo help\n");
  EXPECT_EQ(received_, (std::vector<std::string>{"--help"}));
}

TEST_F(RunCliTest, HelpForAnUnknownCommandIsAUsageError) {
  EXPECT_EQ(Run({"help", "nope"}), base::kExitUsage);
  EXPECT_THAT(err_.str(), StartsWith("slimfit: unknown command 'nope'"));
  EXPECT_EQ(Run({"help", "echo", "extra"}), base::kExitUsage);
  EXPECT_EQ(err_.str(), "slimfit: usage: slimfit help [<command>]\n");
}

}  // namespace
}  // namespace slimfit::client
