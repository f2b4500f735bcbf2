#include "base/flags.h"

#include <cstdint>
#include <string>
#include <vector>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

struct ByteSizeCase {
  const char* text;
  int64_t bytes;
};

TEST(ParseByteSizeTest, AcceptsUnitsAndPlainBytes) {
  const ByteSizeCase cases[] = {
      {"0", 0},
      {"1048576", 1048576},
      {"512B", 512},
      {"512 B", 512},
      {"1KB", 1000},
      {"1KiB", 1024},
      {"512MiB", int64_t{512} << 20},
      {"2GiB", int64_t{2} << 30},
      {"1.5GB", 1500000000},
      {"1.5GiB", int64_t{3} << 29},
      {"3TB", int64_t{3000000000000}},
      {"1TiB", int64_t{1} << 40},
      {"0.3GB", 300000000},  // exact: no floating-point 299999999
      {"1.1KiB", 1126},      // 1126.4 rounded down
      {"0.5kib", 512},       // units are case-insensitive
      {"2gb", 2000000000},
      {"  64 MiB  ", int64_t{64} << 20},
      {"007MB", 7000000},
      {".5KiB", 512},
      {"10.KiB", 10240},
      {"1.000B", 1},  // a zero fraction of a byte is still whole
      {"9223372036854775807", INT64_MAX},
      // (2^23 − 10^-12)·2^40 = 2^63 − 1.0995… rounds down to 2^63 − 2.
      {"8388607.999999999999TiB", 9223372036854775806},
  };
  for (const ByteSizeCase& c : cases) {
    absl::StatusOr<int64_t> bytes = ParseByteSize("memory_budget", c.text);
    ASSERT_TRUE(bytes.ok()) << c.text << ": " << bytes.status();
    EXPECT_EQ(*bytes, c.bytes) << c.text;
  }
}

struct ByteSizeErrorCase {
  const char* text;
  const char* expected_substring;
};

TEST(ParseByteSizeTest, RejectsWithMessagesNamingTheFlagAndValue) {
  const ByteSizeErrorCase cases[] = {
      {"", "empty"},
      {"   ", "empty"},
      {"-1", "cannot be negative"},
      {"+5MiB", "no sign"},
      {"abc", "not a number"},
      {"MiB", "not a number"},
      {".", "not a number"},
      {"1.2.3GB", "not a number"},
      {"1e9", "unknown unit 'e9'"},
      {"12XB", "unknown unit 'XB'"},
      {"5M", "unknown unit 'M'"},  // ambiguous between MB and MiB: refused
      {"5 Mi B", "unknown unit"},
      {"1.5", "whole number"},
      {"1.5B", "whole number"},
      {"9223372036854775808", "too large"},
      {"8TiB0", "unknown unit"},
      {"8388608TiB", "too large"},
      {"99999999999999999999KiB", "too large"},
  };
  for (const ByteSizeErrorCase& c : cases) {
    absl::StatusOr<int64_t> bytes = ParseByteSize("memory_budget", c.text);
    ASSERT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(Message(bytes.status()), HasSubstr(c.expected_substring)) << c.text;
    EXPECT_THAT(Message(bytes.status()), HasSubstr(std::string("--memory_budget=") + c.text)) << c.text;
  }
}

TEST(ParseByteSizeTest, ErrorWithoutAFlagQuotesTheValue) {
  absl::StatusOr<int64_t> bytes = ParseByteSize("", "12XB");
  ASSERT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bytes.status()), HasSubstr("'12XB': unknown unit"));
  EXPECT_THAT(Message(bytes.status()), HasSubstr("KiB, MiB, GiB, TiB"));
}

// A FlagSet over a typical Options struct.
struct Options {
  std::string kind = "hsm";
  int64_t steps = 0;
  int64_t slots = 4;
  double alpha = 0;
  bool json = false;
  bool dropout = true;
  int64_t budget = 0;
};

struct TestFlags {
  TestFlags() : flags_("schedule", "slimfit schedule --steps=T [flags]", "Does a thing.") {
    flags_.String("kind", &options_.kind, "program");
    flags_.Int("steps", &options_.steps, "slices", FlagSet::kRequired);
    flags_.Int("slots", &options_.slots, "budget");
    flags_.Double("alpha", &options_.alpha, "graph size");
    flags_.Bool("json", &options_.json, "json output");
    flags_.Bool("dropout", &options_.dropout, "dropout masks");
    flags_.ByteSize("memory_budget", &options_.budget, "memory");
  }

  absl::Status Parse(std::vector<std::string> args) { return flags_.Parse(args); }

  Options options_;
  FlagSet flags_;
};

class FlagSetTest : public ::testing::Test, public TestFlags {};

TEST_F(FlagSetTest, ParsesBothValueForms) {
  ASSERT_TRUE(
      Parse({"--steps=10", "--slots", "3", "--kind", "ism", "--alpha=2.5", "--memory_budget", "1.5GB"}).ok());
  EXPECT_EQ(options_.steps, 10);
  EXPECT_EQ(options_.slots, 3);
  EXPECT_EQ(options_.kind, "ism");
  EXPECT_EQ(options_.alpha, 2.5);
  EXPECT_EQ(options_.budget, 1500000000);
  EXPECT_TRUE(flags_.IsSet("steps"));
  EXPECT_TRUE(flags_.IsSet("memory_budget"));
  EXPECT_FALSE(flags_.IsSet("json"));
  EXPECT_FALSE(flags_.help_requested());
}

TEST_F(FlagSetTest, KeepsDefaultsForFlagsNotGiven) {
  ASSERT_TRUE(Parse({"--steps=1"}).ok());
  EXPECT_EQ(options_.kind, "hsm");
  EXPECT_EQ(options_.slots, 4);
  EXPECT_FALSE(options_.json);
  EXPECT_TRUE(options_.dropout);
}

TEST_F(FlagSetTest, SeparateValueMayBeNegative) {
  ASSERT_TRUE(Parse({"--steps", "-3", "--alpha", "-0.5"}).ok());
  EXPECT_EQ(options_.steps, -3);
  EXPECT_EQ(options_.alpha, -0.5);
}

TEST_F(FlagSetTest, EmptyInlineValueIsAValue) {
  ASSERT_TRUE(Parse({"--steps=1", "--kind="}).ok());
  EXPECT_EQ(options_.kind, "");
}

TEST_F(FlagSetTest, BoolForms) {
  ASSERT_TRUE(Parse({"--steps=1", "--json", "--nodropout"}).ok());
  EXPECT_TRUE(options_.json);
  EXPECT_FALSE(options_.dropout);
}

TEST_F(FlagSetTest, BoolExplicitValues) {
  ASSERT_TRUE(Parse({"--steps=1", "--json=yes", "--dropout=false"}).ok());
  EXPECT_TRUE(options_.json);
  EXPECT_FALSE(options_.dropout);
}

TEST_F(FlagSetTest, BoolRejectsSeparateAndBadValues) {
  absl::Status status = Parse({"--steps=1", "--json", "false"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("unexpected argument 'false'"));

  TestFlags other;
  status = other.Parse({"--steps=1", "--json=maybe"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--json=maybe: expected true or false"));

  TestFlags third;
  status = third.Parse({"--steps=1", "--nojson=true"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--nojson takes no value"));
}

TEST_F(FlagSetTest, UnknownFlagSuggestsANearMiss) {
  absl::Status status = Parse({"--steps=1", "--slot=3"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("unknown flag --slot for 'slimfit schedule'"));
  EXPECT_THAT(Message(status), HasSubstr("did you mean --slots?"));
  EXPECT_THAT(Message(status), HasSubstr("'slimfit schedule --help'"));
}

TEST_F(FlagSetTest, UnknownFlagSuggestsByPrefix) {
  absl::Status status = Parse({"--steps=1", "--memory=1GiB"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("did you mean --memory_budget?"));
}

TEST_F(FlagSetTest, UnknownFlagWithoutNearMissHasNoSuggestion) {
  absl::Status status = Parse({"--steps=1", "--frobnicate"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("unknown flag --frobnicate"));
  EXPECT_THAT(Message(status), Not(HasSubstr("did you mean")));
}

TEST_F(FlagSetTest, NoPrefixOnANonBoolIsUnknown) {
  absl::Status status = Parse({"--steps=1", "--noslots"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("unknown flag --noslots"));
}

TEST_F(FlagSetTest, RejectsRepeatedFlags) {
  absl::Status status = Parse({"--steps=1", "--steps=2"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--steps given more than once"));
}

TEST_F(FlagSetTest, RejectsMissingValue) {
  absl::Status status = Parse({"--steps"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--steps needs a value"));

  TestFlags other;
  status = other.Parse({"--steps", "--slots=3"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--steps needs a value"));
}

TEST_F(FlagSetTest, RejectsMalformedNumbers) {
  absl::Status status = Parse({"--steps=ten"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--steps=ten: expected an integer"));

  TestFlags other;
  status = other.Parse({"--steps=1", "--alpha=nan"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--alpha=nan: expected a finite number"));

  TestFlags third;
  status = third.Parse({"--steps=1", "--memory_budget=lots"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--memory_budget=lots: not a number"));

  TestFlags fourth;
  status = fourth.Parse({"--steps=99999999999999999999"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("expected an integer"));
}

TEST_F(FlagSetTest, RejectsPositionalArgumentsAndSingleDashes) {
  absl::Status status = Parse({"--steps=1", "extra"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("unexpected argument 'extra'"));

  TestFlags other;
  status = other.Parse({"-steps=1"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("write --steps=1 instead of -steps=1"));

  TestFlags third;
  status = third.Parse({"--steps=1", "--", "file"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("unexpected argument 'file'"));
}

TEST_F(FlagSetTest, DoubleDashAloneEndsFlags) { ASSERT_TRUE(Parse({"--steps=1", "--"}).ok()); }

TEST_F(FlagSetTest, RequiredFlagMissing) {
  absl::Status status = Parse({"--slots=2"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("missing --steps for 'slimfit schedule'"));
}

TEST_F(FlagSetTest, HelpWinsOverEverythingElse) {
  ASSERT_TRUE(Parse({"--bogus", "--help"}).ok());
  EXPECT_TRUE(flags_.help_requested());
  TestFlags other;
  ASSERT_TRUE(other.Parse({"-h"}).ok());
  EXPECT_TRUE(other.flags_.help_requested());
}

TEST_F(FlagSetTest, HelpListsFlagsWithDefaults) {
  const std::string help = flags_.Help();
  EXPECT_THAT(help, HasSubstr("usage: slimfit schedule --steps=T [flags]\n"));
  EXPECT_THAT(help, HasSubstr("Does a thing."));
  EXPECT_THAT(help, HasSubstr("--kind=TEXT"));
  EXPECT_THAT(help, HasSubstr("program (default: hsm)"));
  EXPECT_THAT(help, HasSubstr("--steps=N"));
  EXPECT_THAT(help, HasSubstr("slices (required)"));
  EXPECT_THAT(help, HasSubstr("budget (default: 4)"));
  EXPECT_THAT(help, HasSubstr("--memory_budget=SIZE"));
  EXPECT_THAT(help, HasSubstr("dropout masks (default: true)"));
  EXPECT_THAT(help, HasSubstr("--help"));
  EXPECT_EQ(help.back(), '\n');
}

TEST(FlagSetNoDefaultTest, HelpShowsNoDefaultAndIsSetTells) {
  int64_t rounds = 0;
  double rate = 0;
  FlagSet flags("submit", "slimfit submit", "");
  flags.Int("rounds", &rounds, "rounds to run", FlagSet::kOptionalNoDefault);
  flags.Double("learning_rate", &rate, "peak learning rate", FlagSet::kOptionalNoDefault);
  const std::string help = flags.Help();
  EXPECT_THAT(help, HasSubstr("rounds to run\n"));
  EXPECT_THAT(help, Not(HasSubstr("default: 0")));
  ASSERT_TRUE(flags.Parse({"--rounds=5"}).ok());
  EXPECT_EQ(rounds, 5);
  EXPECT_TRUE(flags.IsSet("rounds"));
  EXPECT_FALSE(flags.IsSet("learning_rate"));
}

// A command with positionals and a list flag, like `slimfit submit [JOB.textproto] --data=FILE...`.
struct ListFlags {
  ListFlags() : flags_("submit", "slimfit submit [JOB] [flags]", "") {
    flags_.Positional("JOB", &job_, "the job");
    flags_.Positional("EXTRA", &extra_, "more");
    flags_.StringList("data", &data_, "data files");
    flags_.Bool("json", &json_, "json output");
    flags_.Int("rounds", &rounds_, "rounds");
  }

  absl::Status Parse(std::vector<std::string> args) { return flags_.Parse(args); }

  std::string job_;
  std::string extra_;
  std::vector<std::string> data_;
  bool json_ = false;
  int64_t rounds_ = 0;
  FlagSet flags_;
};

TEST(FlagSetListTest, RepeatsAndCommasAppendInOrder) {
  ListFlags f;
  ASSERT_TRUE(f.Parse({"--data=a.txt,b.txt", "--json", "--data", "c.txt", "--data=d"}).ok());
  EXPECT_EQ(f.data_, (std::vector<std::string>{"a.txt", "b.txt", "c.txt", "d"}));
  EXPECT_TRUE(f.flags_.IsSet("data"));
}

TEST(FlagSetListTest, RejectsEmptyItems) {
  for (const char* arg : {"--data=", "--data=a,,b", "--data=a,"}) {
    ListFlags f;
    const absl::Status status = f.Parse({arg});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << arg;
    EXPECT_THAT(Message(status), HasSubstr("comma-separated list of non-empty values")) << arg;
  }
}

TEST(FlagSetListTest, OtherFlagsStillRefuseRepeats) {
  ListFlags f;
  const absl::Status status = f.Parse({"--rounds=1", "--data=a", "--rounds=2"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--rounds given more than once"));
}

TEST(FlagSetPositionalTest, FillsInOrderAnywhereAmongFlags) {
  ListFlags f;
  ASSERT_TRUE(f.Parse({"--json", "job.txt", "--rounds", "3", "more"}).ok());
  EXPECT_EQ(f.job_, "job.txt");
  EXPECT_EQ(f.extra_, "more");
  EXPECT_EQ(f.rounds_, 3);
  EXPECT_TRUE(f.flags_.IsSet("JOB"));
  EXPECT_TRUE(f.flags_.IsSet("EXTRA"));
}

TEST(FlagSetPositionalTest, OptionalPositionalsMayBeLeftOut) {
  ListFlags f;
  ASSERT_TRUE(f.Parse({"--json"}).ok());
  EXPECT_EQ(f.job_, "");
  EXPECT_FALSE(f.flags_.IsSet("JOB"));
}

TEST(FlagSetPositionalTest, DoubleDashMakesEverythingPositional) {
  ListFlags f;
  ASSERT_TRUE(f.Parse({"--", "--weird-name", "-"}).ok());
  EXPECT_EQ(f.job_, "--weird-name");
  EXPECT_EQ(f.extra_, "-");
}

TEST(FlagSetPositionalTest, RejectsOneTooMany) {
  ListFlags f;
  const absl::Status status = f.Parse({"a", "b", "c"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status),
              HasSubstr("unexpected argument 'c' for 'slimfit submit', which takes 2 arguments (JOB EXTRA)"));
}

TEST(FlagSetPositionalTest, RequiredPositionalMissing) {
  std::string job;
  FlagSet flags("status", "slimfit status JOB", "");
  flags.Positional("JOB", &job, "the job id", FlagSet::kRequired);
  const absl::Status status = flags.Parse({});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("missing argument JOB for 'slimfit status'"));

  std::string other;
  FlagSet more("status", "slimfit status JOB", "");
  more.Positional("JOB", &other, "the job id", FlagSet::kRequired);
  const absl::Status extra = more.Parse({"job-1", "job-2"});
  EXPECT_THAT(Message(extra), HasSubstr("which takes one argument (JOB)"));
}

TEST(FlagSetPositionalTest, HelpListsArgumentsBeforeFlags) {
  ListFlags f;
  const std::string help = f.flags_.Help();
  const size_t arguments = help.find("\narguments:\n  JOB ");
  const size_t flags = help.find("\nflags:\n");
  ASSERT_NE(arguments, std::string::npos) << help;
  ASSERT_NE(flags, std::string::npos) << help;
  EXPECT_LT(arguments, flags);
  EXPECT_THAT(help, HasSubstr("--data=A[,B...]"));
}

TEST(FlagSetInvocationTest, NamesADaemonInMessages) {
  std::string value;
  FlagSet flags("worker", "slimfit-worker [flags]", "A daemon.");
  flags.SetInvocation("slimfit-worker");
  flags.String("state_dir", &value, "dir", FlagSet::kRequired);
  const absl::Status status = flags.Parse(std::vector<std::string>{"--bogus=1"});
  EXPECT_THAT(status.message(), HasSubstr("for 'slimfit-worker'"));
  EXPECT_THAT(status.message(), Not(HasSubstr("slimfit worker")));
}

struct DaemonOptions {
  std::string listen = "127.0.0.1:0";
  std::string state_dir;
  int64_t threads = 1;
  bool insecure = false;
  std::vector<std::string> data;
};

class ConfigFileTest : public ::testing::Test {
 protected:
  ConfigFileTest() : flags_("daemon", "daemon [flags]", "A daemon.") {
    flags_.SetInvocation("slimfit-daemon");
    flags_.ConfigFile("config", "TOML file of flags");
    flags_.String("listen", &options_.listen, "address");
    flags_.String("state_dir", &options_.state_dir, "state", FlagSet::kRequired);
    flags_.Int("threads", &options_.threads, "threads");
    flags_.Bool("insecure", &options_.insecure, "plaintext");
    flags_.StringList("data", &options_.data, "files");
  }
  absl::Status Parse(const std::string& toml, std::vector<std::string> args) {
    const std::string path = testing_util::WriteTempFile("daemon.toml", toml);
    args.push_back("--config=" + path);
    return flags_.Parse(args);
  }

  DaemonOptions options_;
  FlagSet flags_;
};

TEST_F(ConfigFileTest, TheFileSetsFlagsAndTheCommandLineOverridesThem) {
  const absl::Status status = Parse(
      "listen = \"0.0.0.0:50051\"\nstate_dir = \"/var/lib/slimfit\"\nthreads = 4\ninsecure = true\n"
      "data = [\"a\", \"b\"]\n",
      {"--threads=8", "--noinsecure"});
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(options_.listen, "0.0.0.0:50051");
  EXPECT_EQ(options_.state_dir, "/var/lib/slimfit");  // a required flag may come from the file
  EXPECT_EQ(options_.threads, 8);
  EXPECT_FALSE(options_.insecure);
  EXPECT_EQ(options_.data, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(flags_.IsSet("listen"));
}

TEST_F(ConfigFileTest, AnUnknownKeyNamesTheFileAndSuggestsTheFlag) {
  const absl::Status status = Parse("state_dir = \"/s\"\nthread = 2\n", {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("daemon.toml: unknown flag --thread"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("--threads"));
}

TEST_F(ConfigFileTest, AMalformedValueNamesTheFile) {
  const absl::Status status = Parse("state_dir = \"/s\"\nthreads = \"many\"\n", {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("daemon.toml: --threads=many: expected an integer"));
}

TEST_F(ConfigFileTest, AFileCannotNameAnotherConfigFile) {
  const absl::Status status = Parse("state_dir = \"/s\"\nconfig = \"other.toml\"\n", {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ConfigFileTest, AMissingFileIsReportedWithTheFlag) {
  const absl::Status status = flags_.Parse({"--config=" + testing_util::TempPath("absent.toml")});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--config: "));
}

}  // namespace
}  // namespace slimfit::base
