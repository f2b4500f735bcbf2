// End-to-end tests of the built `slimfit` binary: run it as a user would and check exit statuses,
// stdout and the one-line errors on stderr.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/test_util.h"
#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace {

using ::slimfit::base::ReadFileToString;
using ::slimfit::testing_util::RunfilePath;
using ::slimfit::testing_util::TempPath;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::json;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs client/slimfit with `args`, stdout and stderr captured in files.
Result Slimfit(const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string out_path = TempPath(absl::StrCat("stdout.", counter));
  const std::string err_path = TempPath(absl::StrCat("stderr.", counter++));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  const std::string binary = RunfilePath("client/slimfit");
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  Result result;
  const int spawned = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    ADD_FAILURE() << "cannot run " << binary << ": error " << spawned;
    return result;
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
    ADD_FAILURE() << "slimfit did not exit normally";
    return result;
  }
  result.exit_code = WEXITSTATUS(status);
  absl::StatusOr<std::string> out = slimfit::base::ReadFileToString(out_path);
  absl::StatusOr<std::string> err = slimfit::base::ReadFileToString(err_path);
  if (!out.ok() || !err.ok()) {
    ADD_FAILURE() << "cannot read what slimfit printed: " << out.status() << "; " << err.status();
    return result;
  }
  result.out = *std::move(out);
  result.err = *std::move(err);
  return result;
}

// Exactly one line "slimfit: ...\n" on stderr and nothing on stdout.
void ExpectOneLineError(const Result& result) {
  EXPECT_EQ(result.out, "");
  EXPECT_THAT(result.err, StartsWith("slimfit: "));
  EXPECT_THAT(result.err, EndsWith("\n"));
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

TEST(SlimfitCliTest, Schedule) {
  const Result result = Slimfit({"schedule", "--steps=1000", "--slots=8"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_THAT(result.out, HasSubstr("cost C(T,M)     5285 slice forwards\n"));
  EXPECT_THAT(result.out, HasSubstr("overhead C - T  4285 (+428.5%)\n"));
}

TEST(SlimfitCliTest, ScheduleJsonWithActions) {
  const Result result = Slimfit({"schedule", "--steps", "5", "--slots", "2", "--json", "--actions"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json json = Json::parse(result.out);
  EXPECT_EQ(json["cost"], 11);
  EXPECT_EQ(json["actions"].size(), json["action_count"].get<size_t>());
}

TEST(SlimfitCliTest, BadUsageExitsTwoWithOneLine) {
  Result result = Slimfit({"schedule", "--steps=abc", "--slots=2"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr("--steps=abc: expected an integer"));

  result = Slimfit({"schedule", "--slots=2"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr("missing --steps"));

  result = Slimfit({"plan", "--seq_len=64", "--memory_budget=lots", "--profile=x"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr("--memory_budget=lots"));

  result = Slimfit({});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
}

TEST(SlimfitCliTest, PlannerErrorsKeepTheirMessage) {
  const Result result = Slimfit({"schedule", "--steps=70000", "--slots=2"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr("70000"));
}

TEST(SlimfitCliTest, UnknownCommand) {
  const Result result = Slimfit({"frobnicate", "--json"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_EQ(result.err,
            "slimfit: unknown command 'frobnicate'; run 'slimfit help' for the list of commands\n");
}

TEST(SlimfitCliTest, Help) {
  Result result = Slimfit({"help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.err, "");
  for (const char* command : {"schedule", "plan", "calibrate"}) {
    EXPECT_THAT(result.out, HasSubstr(absl::StrCat("\n  ", command, " "))) << command;
  }
  result = Slimfit({"plan", "--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.out, StartsWith("usage: slimfit plan"));
  result = Slimfit({"help", "calibrate"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.out, StartsWith("usage: slimfit calibrate"));
}

// docs/CLI.md is the help text of every command (scripts/gen_cli_docs.sh), checked in CI against a
// fresh build: a default that depends on the machine, such as the number of cores, must be said in
// words or the page would differ between machines.
TEST(SlimfitCliTest, HelpPrintsNoMachineDependentDefault) {
  for (const char* command : {"plan", "calibrate", "generate", "score"}) {
    const Result result = Slimfit({command, "--help"});
    ASSERT_EQ(result.exit_code, 0) << command;
    const size_t start = result.out.find("\n  --threads=N ");
    ASSERT_NE(start, std::string::npos) << command;
    const std::string line = result.out.substr(start + 1, result.out.find('\n', start + 1) - start - 1);
    EXPECT_THAT(line, EndsWith("(default: the cores available)")) << command;
  }
}

TEST(SlimfitCliTest, TransformerPlanFromALengthsFile) {
  const std::string lengths = RunfilePath("client/testdata/lengths.txt");
  Result result = Slimfit({"plan", "--arch=transformer", "--d_model=1024", "--layers=24", "--heads=16",
                           absl::StrCat("--length_distribution=", lengths)});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("4 sequences from "));
  EXPECT_THAT(result.out, HasSubstr("layout        recompute      activations"));
  EXPECT_THAT(result.out, HasSubstr("\npadding-free  full "));

  result = Slimfit({"plan", "--arch=transformer", "--d_model=1024", "--layers=24", "--heads=16",
                    absl::StrCat("--length_distribution=", lengths), "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json json = Json::parse(result.out);
  EXPECT_EQ(json["batch"]["tokens"], 5640.0);
  EXPECT_EQ(json["baselines"].size(), 12u);
}

const std::vector<std::string> kTinyModel = {"plan",      "--d_model=32", "--layers=1",   "--heads=2",
                                             "--d_ff=64", "--vocab=32",   "--seq_len=256"};

std::vector<std::string> Tiny(std::vector<std::string> more) {
  std::vector<std::string> args = kTinyModel;
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(SlimfitCliTest, PerformerPlanWithAProfile) {
  const std::string profile = absl::StrCat("--profile=", RunfilePath("client/testdata/tiny_cpu.profile"));
  Result result = Slimfit(Tiny({profile, "--memory_budget=4MiB"}));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("\nchosen plan\n"));
  EXPECT_THAT(result.out, HasSubstr("\nPareto frontier: "));

  result = Slimfit(Tiny({profile, "--memory_budget=4MiB", "--json"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json json = Json::parse(result.out);
  EXPECT_EQ(json["chosen"].size(), 11u);  // the keys of a plan (README, "slimfit plan")
  EXPECT_LE(json["chosen"]["predicted_peak_bytes"].get<double>(), 0.9 * (4 << 20));
}

TEST(SlimfitCliTest, NothingFitsExitsOne) {
  const Result result = Slimfit(Tiny(
      {absl::StrCat("--profile=", RunfilePath("client/testdata/tiny_cpu.profile")), "--memory_budget=1KiB"}));
  EXPECT_EQ(result.exit_code, 1);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, StartsWith("slimfit: no plan fits: "));
}

// The real engine: one calibration written to a file, then a plan from that file, then a plan
// that calibrates by itself.
TEST(SlimfitCliTest, CalibrateThenPlan) {
  const std::string path = TempPath("cpu.profile");
  Result result = Slimfit({"calibrate", "--device=cpu", "--threads=1", "--out", path});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, StartsWith("wrote the profile of cpu"));
  EXPECT_THAT(result.out, HasSubstr(path));
  absl::StatusOr<std::string> written = slimfit::base::ReadFileToString(path);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_THAT(*written, HasSubstr("flops_per_second: "));

  result = Slimfit(Tiny({absl::StrCat("--profile=", path), "--memory_budget=64MiB", "--json"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(Json::parse(result.out)["device"]["profile"]["threads"], 1);

  result = Slimfit(Tiny({"--device=cpu", "--threads=1", "--memory_budget=64MiB", "--json"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json json = Json::parse(result.out);
  EXPECT_EQ(json["device"]["source"], "calibrated");
  EXPECT_GT(json["device"]["profile"]["flops_per_second"].get<double>(), 0);
}

// ─── service commands ───

TEST(SlimfitCliTest, HelpListsTheServiceCommands) {
  Result result = Slimfit({"help"});
  EXPECT_EQ(result.exit_code, 0);
  for (const char* command : {"submit", "status", "watch", "cancel", "jobs", "workers", "export"}) {
    EXPECT_THAT(result.out, HasSubstr(absl::StrCat("\n  ", command, " "))) << command;
  }
  result = Slimfit({"help", "submit"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.out, StartsWith("usage: slimfit submit [JOB.textproto]"));
  EXPECT_THAT(result.out, HasSubstr("--coordinator=TEXT"));
  result = Slimfit({"watch", "--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.out, StartsWith("usage: slimfit watch JOB"));
  result = Slimfit({"plan", "--all", "--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.out, StartsWith("usage: slimfit plan (--worker=ID | --all)"));
  result = Slimfit({"plan", "--help"});
  EXPECT_THAT(result.out, HasSubstr("slimfit plan (--worker=ID | --all) ..."));
}

TEST(SlimfitCliTest, ServiceCommandUsageErrorsExitTwo) {
  Result result = Slimfit({"status"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr("missing argument JOB for 'slimfit status'"));

  result = Slimfit({"submit", "--data", TempPath("no-such-corpus.txt"), "--coordinator=127.0.0.1:1"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr("no-such-corpus.txt"));

  const std::string spec = TempPath("broken.textproto");
  std::ofstream(spec) << "rounds: 3\nmodel { config { d_model: wide } }\n";
  result = Slimfit({"submit", spec, "--coordinator=127.0.0.1:1"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr(spec + ":2:"));

  result = Slimfit({"plan", "--all", "--profile=cpu.profile", "--seq_len=64"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr("--profile belongs to the offline 'slimfit plan'"));

  result = Slimfit({"jobs", "--coordinator=localhost"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
}

TEST(SlimfitCliTest, UnreachableCoordinatorExitsOneNamingIt) {
  Result result = Slimfit({"watch", "job-1", "--coordinator=127.0.0.1:1"});
  EXPECT_EQ(result.exit_code, 1);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, StartsWith("slimfit: cannot reach the coordinator at 127.0.0.1:1 "));

  // The address from the environment, when --coordinator is not given.
  setenv("SLIMFIT_COORDINATOR", "127.0.0.1:1", 1);
  result = Slimfit({"jobs"});
  unsetenv("SLIMFIT_COORDINATOR");
  EXPECT_EQ(result.exit_code, 1);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr("cannot reach the coordinator at 127.0.0.1:1"));
}

// The binary against a scripted coordinator: the token travels, codes become exit statuses.
TEST(SlimfitCliTest, TalksToACoordinator) {
  namespace v1 = slimfit::v1;
  using slimfit::client::FakeCoordinator;
  std::unique_ptr<FakeCoordinator> fake = FakeCoordinator::Start();
  fake->get_job = [](const v1::GetJobRequest& request, v1::Job* job) {
    if (request.job_id() != "job-7") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + request.job_id() + " not found");
    }
    job->set_job_id("job-7");
    job->set_state(v1::JOB_STATE_RUNNING);
    job->mutable_progress()->set_rounds(10);
    job->mutable_progress()->set_rounds_completed(3);
    return grpc::Status::OK;
  };
  fake->watch_job = [](const v1::WatchJobRequest&, int, const FakeCoordinator::Writer<v1::JobEvent>& write) {
    v1::JobEvent snapshot;
    snapshot.set_sequence(1);
    snapshot.mutable_snapshot()->set_job_id("job-7");
    snapshot.mutable_snapshot()->set_state(v1::JOB_STATE_RUNNING);
    write(snapshot);
    v1::JobEvent failed;
    failed.set_sequence(2);
    failed.mutable_state_changed()->set_previous(v1::JOB_STATE_RUNNING);
    failed.mutable_state_changed()->set_state(v1::JOB_STATE_FAILED);
    failed.mutable_state_changed()->set_reason("shard 3 failed 5 times");
    write(failed);
    return grpc::Status::OK;
  };
  const std::string coordinator = "--coordinator=" + fake->address();
  setenv("SLIMFIT_TOKEN", "env-token", 1);
  Result result = Slimfit({"status", "job-7", coordinator});
  unsetenv("SLIMFIT_TOKEN");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("rounds       3/10\n"));
  EXPECT_EQ(fake->calls().authorizations.at(0), "Bearer env-token");

  result = Slimfit({"status", "job-8", coordinator, "--token=t"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_EQ(result.err, "slimfit: GetJob: job job-8 not found\n");

  // watch streams: the events stay on stdout, the outcome is the one-line error.
  result = Slimfit({"watch", "job-7", coordinator});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.out, HasSubstr("state RUNNING -> FAILED: shard 3 failed 5 times\n"));
  EXPECT_EQ(result.err, "slimfit: job-7 FAILED: shard 3 failed 5 times\n");
}

TEST(SlimfitCliTest, CalibrateRejectsAnUnknownDevice) {
  const Result result = Slimfit({"calibrate", "--device=nonsense"});
  EXPECT_EQ(result.exit_code, 2);
  ExpectOneLineError(result);
  EXPECT_THAT(result.err, HasSubstr("nonsense"));
}

}  // namespace
