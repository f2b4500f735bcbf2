// The real `slimfit-worker` binary as a subprocess, against the TestCoordinator in this process:
// registration, heartbeats, a gradient through the daemon, identity across restarts, SIGTERM,
// supersession and usage errors.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/files.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "worker/test_coordinator.h"

extern char** environ;

namespace slimfit::worker {
namespace {

using ::slimfit::base::ReadFileToString;
using ::slimfit::testing_util::RunfilePath;
using ::slimfit::testing_util::TempPath;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kToken[] = "worker-secret";

// One slimfit-worker process; killed (SIGKILL) if a test leaves it running.
class WorkerProcess {
 public:
  // Starts the binary with `args`; SLIMFIT_WORKER_TOKEN is `env_token` (unset when empty).
  WorkerProcess(const std::vector<std::string>& args, const std::string& env_token, const std::string& name)
      : err_path_(TempPath(name + ".stderr")) {
    const std::string binary = RunfilePath("worker/slimfit-worker");
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!absl::StartsWith(*e, "SLIMFIT_WORKER_TOKEN=")) env.push_back(*e);
    }
    if (!env_token.empty()) env.push_back(absl::StrCat("SLIMFIT_WORKER_TOKEN=", env_token));
    std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    const int spawned = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) {
      ADD_FAILURE() << "cannot run " << binary << ": " << std::strerror(spawned);
      pid_ = -1;
    }
  }
  ~WorkerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  void Signal(int signal) {
    if (pid_ > 0) kill(pid_, signal);
  }

  // The exit status, or -1 when the process did not exit normally within `timeout`.
  int Wait(absl::Duration timeout = absl::Seconds(30)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (pid_ > 0 && absl::Now() < deadline) {
      int status = 0;
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }

  std::string Stderr() const { return base::ReadFileToString(err_path_).value_or(""); }

 private:
  std::string err_path_;
  pid_t pid_ = -1;
};

class WorkerMainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TestCoordinatorServer::Start(&coordinator_);
    ASSERT_NE(server_, nullptr);
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    state_dir_ = TempPath(name_ + "_state");
    port_file_ = TempPath(name_ + "_port");
  }

  std::vector<std::string> Args(const std::string& coordinator) const {
    return {"--coordinator=" + coordinator, "--memory_budget=256MiB", "--state_dir=" + state_dir_,
            "--profile=" + RunfilePath("client/testdata/tiny_cpu.profile"), "--port_file=" + port_file_};
  }

  std::unique_ptr<WorkerProcess> Start(const std::string& tag = "") {
    unlink(port_file_.c_str());
    return std::make_unique<WorkerProcess>(Args(server_->address()), kToken, name_ + tag);
  }

  // The address in --port_file once the worker writes it; "" after 20 s.
  std::string WaitForPort() const {
    for (int i = 0; i < 2000; ++i) {
      absl::StatusOr<std::string> text = base::ReadFileToString(port_file_);
      if (text.ok()) return std::string(absl::StripSuffix(*text, "\n"));
      absl::SleepFor(absl::Milliseconds(10));
    }
    return "";
  }

  bool WaitForCounts(size_t registrations, size_t heartbeats) {
    return coordinator_.WaitFor(
        [&](const TestCoordinator& c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return c.registration_count() >= registrations && c.heartbeat_count() >= heartbeats;
        },
        absl::Seconds(20));
  }

  TestCoordinator coordinator_;
  std::unique_ptr<TestCoordinatorServer> server_;
  std::string name_, state_dir_, port_file_;
};

TEST_F(WorkerMainTest, RegistersServesHeartbeatsAndLeavesOnSigterm) {
  absl::StatusOr<performer::PerformerModel> model = performer::PerformerModel::Create(
      performer::ModelConfig{64, 16, 1, 2, 32}, performer::DType::kFloat32, at::kCPU, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  coordinator_.Publish("job-1", 1, *model);

  std::unique_ptr<WorkerProcess> worker = Start();
  const std::string address = WaitForPort();
  ASSERT_THAT(address, StartsWith("127.0.0.1:")) << worker->Stderr();
  ASSERT_TRUE(WaitForCounts(1, 2)) << worker->Stderr();
  const v1::RegisterWorkerRequest registration = coordinator_.registrations()[0];
  EXPECT_EQ(registration.worker_id(), "");
  EXPECT_EQ(registration.advertise_address(), address);
  EXPECT_EQ(registration.device(), "cpu");
  EXPECT_EQ(registration.memory_budget_bytes(), 256 << 20);
  EXPECT_EQ(registration.threads(), 1);
  EXPECT_EQ(registration.version(), "0.4.0");
  EXPECT_EQ(registration.profile().device_name(), "test CPU");
  const v1::HeartbeatRequest heartbeat = coordinator_.heartbeats().back();
  EXPECT_EQ(heartbeat.worker_id(), "w-0001");
  EXPECT_EQ(heartbeat.state(), v1::WORKER_STATE_IDLE);

  // The worker keeps its credential privately.
  struct stat credential_file;
  ASSERT_EQ(stat((state_dir_ + "/credential").c_str(), &credential_file), 0);
  EXPECT_EQ(credential_file.st_mode & 0777, 0600);

  // The Worker service answers at the advertised address: its profile to the join token, gradients
  // to the coordinator's token of this incarnation only.
  auto stub = v1::Worker::NewStub(rpc::MakeChannel(address));
  auto context = rpc::MakeClientContext(kToken, std::chrono::seconds(10));
  v1::GetProfileResponse profile;
  ASSERT_TRUE(stub->GetProfile(context.get(), v1::GetProfileRequest(), &profile).ok());
  EXPECT_EQ(profile.worker_id(), "w-0001");
  context = rpc::MakeClientContext("wrong", std::chrono::seconds(10));
  EXPECT_EQ(stub->GetProfile(context.get(), v1::GetProfileRequest(), &profile).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  // A gradient through the daemon.
  v1::ComputeGradientRequest request;
  request.set_job_id("job-1");
  request.set_round(1);
  request.set_attempt(1);
  request.set_parameter_version(1);
  performer::Plan plan;
  plan.slice = 4;
  *request.mutable_plan() = planner::PlanToProto(plan);
  request.set_sequence_length(16);
  request.set_token_encoding(v1::TOKEN_ENCODING_UINT8);
  request.set_tokens(std::string(20, '\x05'));
  request.set_loss_normalizer(18);
  context = rpc::MakeClientContext(kToken, std::chrono::seconds(30));
  v1::ComputeGradientResponse refused_response;
  auto refused = stub->ComputeGradient(context.get(), request);
  while (refused->Read(&refused_response)) {
  }
  EXPECT_EQ(refused->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  context = rpc::MakeClientContext(coordinator_.CoordinatorToken("w-0001"), std::chrono::seconds(30));
  auto reader = stub->ComputeGradient(context.get(), request);
  v1::ComputeGradientResponse response;
  std::optional<v1::GradientSummary> summary;
  int chunks = 0;
  while (reader->Read(&response)) {
    if (response.has_chunk()) ++chunks;
    if (response.has_summary()) summary = response.summary();
  }
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(summary.has_value());
  EXPECT_EQ(summary->token_count(), 18);
  EXPECT_EQ(summary->sequences(), 2);
  EXPECT_GT(summary->measured_peak_bytes(), 0);
  EXPECT_EQ(chunks, static_cast<int>(model->names().size()));
  // The next heartbeat reports the peak and the cached version.
  const size_t seen = coordinator_.heartbeats().size();
  ASSERT_TRUE(WaitForCounts(1, seen + 2));
  bool peak_reported = false;
  for (const v1::HeartbeatRequest& h : coordinator_.heartbeats()) {
    peak_reported = peak_reported || h.measured_peak_bytes() == summary->measured_peak_bytes();
  }
  EXPECT_TRUE(peak_reported);
  EXPECT_EQ(coordinator_.heartbeats().back().cached_parameter_versions().at("job-1"), 1u);

  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(), 0) << worker->Stderr();
  const std::vector<v1::DeregisterWorkerRequest> left = coordinator_.deregistrations();
  ASSERT_EQ(left.size(), 1u) << worker->Stderr();
  EXPECT_EQ(left[0].worker_id(), "w-0001");
  EXPECT_EQ(left[0].reason(), "SIGTERM");
  EXPECT_THAT(worker->Stderr(), HasSubstr("deregistered"));
}

TEST_F(WorkerMainTest, KeepsItsIdAcrossARestart) {
  {
    std::unique_ptr<WorkerProcess> worker = Start("_first");
    ASSERT_TRUE(WaitForCounts(1, 1)) << worker->Stderr();
    worker->Signal(SIGINT);
    ASSERT_EQ(worker->Wait(), 0) << worker->Stderr();
  }
  std::unique_ptr<WorkerProcess> worker = Start("_second");
  const size_t first_heartbeats = coordinator_.heartbeats().size();
  ASSERT_TRUE(WaitForCounts(2, first_heartbeats + 1)) << worker->Stderr();
  const std::vector<v1::RegisterWorkerRequest> registrations = coordinator_.registrations();
  EXPECT_EQ(registrations[1].worker_id(), "w-0001");
  EXPECT_EQ(coordinator_.heartbeats().back().incarnation(), 2u);
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(), 0) << worker->Stderr();
  EXPECT_EQ(coordinator_.deregistrations().size(), 2u);
}

TEST_F(WorkerMainTest, WaitsForACoordinatorThatIsNotUpYet) {
  const int port = server_->port();
  server_->Shutdown();
  std::unique_ptr<WorkerProcess> worker = Start();
  ASSERT_FALSE(WaitForPort().empty()) << worker->Stderr();  // serving meanwhile
  absl::SleepFor(absl::Milliseconds(500));
  server_ = TestCoordinatorServer::Start(&coordinator_, port);
  ASSERT_NE(server_, nullptr);
  ASSERT_TRUE(WaitForCounts(1, 1)) << worker->Stderr();
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(), 0) << worker->Stderr();
}

TEST_F(WorkerMainTest, SupersededWorkerExitsNonZero) {
  std::unique_ptr<WorkerProcess> worker = Start();
  ASSERT_TRUE(WaitForCounts(1, 1)) << worker->Stderr();
  coordinator_.Supersede("w-0001");
  EXPECT_EQ(worker->Wait(), 1) << worker->Stderr();
  EXPECT_THAT(worker->Stderr(),
              HasSubstr("slimfit-worker: stopped serving: this worker's registration was superseded"));
  EXPECT_TRUE(coordinator_.deregistrations().empty());
}

TEST_F(WorkerMainTest, RevokedWorkerStopsAndCannotComeBack) {
  std::unique_ptr<WorkerProcess> worker = Start();
  ASSERT_TRUE(WaitForCounts(1, 1)) << worker->Stderr();
  coordinator_.Revoke("w-0001");
  EXPECT_EQ(worker->Wait(), 2) << worker->Stderr();
  EXPECT_THAT(worker->Stderr(),
              HasSubstr("slimfit-worker: stopped serving: the coordinator refuses this worker"));
  std::unique_ptr<WorkerProcess> again = Start("_again");  // same state directory, same credential
  EXPECT_EQ(again->Wait(), 2) << again->Stderr();
  EXPECT_THAT(again->Stderr(), HasSubstr("revoked"));
}

TEST_F(WorkerMainTest, LaterStartsNeedNoJoinToken) {
  {
    std::unique_ptr<WorkerProcess> worker = Start();
    ASSERT_TRUE(WaitForCounts(1, 1)) << worker->Stderr();
    worker->Signal(SIGTERM);
    ASSERT_EQ(worker->Wait(), 0) << worker->Stderr();
  }
  unlink(port_file_.c_str());
  WorkerProcess worker(Args(server_->address()), "", name_ + "_tokenless");
  ASSERT_TRUE(WaitForCounts(2, 1)) << worker.Stderr();
  EXPECT_EQ(coordinator_.registrations().back().worker_id(), "w-0001");
  worker.Signal(SIGTERM);
  EXPECT_EQ(worker.Wait(), 0) << worker.Stderr();
}

TEST_F(WorkerMainTest, RefusedTokenExitsTwo) {
  WorkerProcess worker(Args(server_->address()), "not-the-token", name_);
  EXPECT_EQ(worker.Wait(), 2) << worker.Stderr();
  EXPECT_THAT(worker.Stderr(), HasSubstr("slimfit-worker: registering with the coordinator"));
}

TEST_F(WorkerMainTest, BadFlagsExitTwoWithOneLine) {
  struct Case {
    std::vector<std::string> args;
    std::string token;
    std::string message;
  };
  std::vector<std::string> bad_budget = Args(server_->address());
  bad_budget[1] = "--memory_budget=lots";
  std::vector<std::string> missing_profile = Args(server_->address());
  missing_profile[3] = "--profile=" + TempPath("no_such.profile");
  std::vector<std::string> cuda = Args(server_->address());
  cuda.push_back("--device=cuda:0");
  const std::vector<Case> cases = {
      {bad_budget, kToken, "--memory_budget=lots"},
      {Args(server_->address()), "", "give the join token"},
      {{"--coordinator=127.0.0.1:1"}, kToken, "missing --memory_budget"},
      {missing_profile, kToken, "--profile"},
      {cuda, kToken, "--device=cuda:0"},
  };
  int i = 0;
  for (const Case& c : cases) {
    WorkerProcess worker(c.args, c.token, absl::StrCat(name_, i++));
    EXPECT_EQ(worker.Wait(), 2) << c.message;
    const std::string err = worker.Stderr();
    EXPECT_THAT(err, StartsWith("slimfit-worker: ")) << err;
    EXPECT_THAT(err, HasSubstr(c.message));
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

}  // namespace
}  // namespace slimfit::worker
