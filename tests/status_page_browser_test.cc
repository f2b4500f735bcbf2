// The coordinator's status page in a real browser: a coordinator with two workers and a running job,
// the page loaded by headless Chromium (Debian's chromium) with the client token in the URL fragment,
// its DOM after the page's script ran checked for the workers, the job, its loss curves and the
// workers' plan searches; the page with a wrong token shows the login form and no data. A
// screenshot goes to the test's undeclared outputs (bazel-testlogs/.../test.outputs/).
//
// Skips (saying why) only when no chromium is installed; scripts/setup.sh installs it.
#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"
#include "tests/cluster.h"
#include "tests/daemon_process.h"
#include "tests/ops_support.h"

namespace slimfit::testing_util {
namespace {

constexpr char kChromium[] = "/usr/bin/chromium";

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

// Chromium without a sandbox (tests run as root), GPU, network services or a profile of anyone's.
std::vector<std::string> ChromiumFlags(const std::string& name) {
  return {"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
          absl::StrCat("--user-data-dir=", TempPath(absl::StrCat("chromium-", name))),
          // Virtual time runs the page's timers and waits for its fetches, up to this budget.
          "--virtual-time-budget=3000"};
}

// The page's DOM after its script ran, and (when `screenshot` is not empty) a PNG of it there.
absl::StatusOr<std::string> DumpDom(const std::string& url, const std::string& name,
                                    const std::string& screenshot = "") {
  std::vector<std::string> args = ChromiumFlags(name);
  args.push_back("--dump-dom");
  if (!screenshot.empty()) {
    args.push_back(absl::StrCat("--screenshot=", screenshot));
    args.push_back("--window-size=1280,2200");
  }
  args.push_back(url);
  absl::StatusOr<CommandResult> result = RunCommand(kChromium, args, absl::Seconds(120));
  if (!result.ok()) return result.status();
  if (result->exit_status != 0) {
    return absl::InternalError(absl::StrCat("chromium exited ", result->exit_status, ": ", result->err));
  }
  return result->out;
}

std::string OutputsDir() {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  return dir != nullptr ? dir : TempPath("");
}

TEST(StatusPageBrowserTest, ShowsTheWorkersAndTheRunningJob) {
  if (!Exists(kChromium))
    GTEST_SKIP() << kChromium << " is not installed (scripts/setup.sh installs chromium)";
  setenv("HOME", TempPath("home").c_str(), 1);  // chromium writes caches under $HOME

  Cluster cluster("status_page");
  const MetricsEndpoint metrics = MetricsFlags("page-coordinator");
  ASSERT_TRUE(cluster.StartCoordinator(metrics.flags).ok()) << cluster.Logs();
  for (const char* budget : {"700KiB", "4MiB"})
    ASSERT_TRUE(cluster.StartWorker(budget).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();
  absl::StatusOr<v1::Job> job = SubmitSmallJob(cluster, /*rounds=*/100000);  // runs until cancelled
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  absl::StatusOr<v1::Job> running = WaitForRounds(cluster, job->job_id(), 2, absl::Seconds(60));
  ASSERT_TRUE(running.ok()) << running.status() << cluster.Logs();
  ASSERT_EQ(running->state(), v1::JOB_STATE_RUNNING) << running->state_reason();
  absl::StatusOr<std::string> address =
      cluster.coordinator().WaitForAddress(metrics.port_file, absl::Seconds(10));
  ASSERT_TRUE(address.ok()) << address.status();

  auto context = rpc::MakeClientContext(kClientToken, std::chrono::seconds(5));
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(cluster.Stub()->ListWorkers(context.get(), v1::ListWorkersRequest(), &workers).ok());
  ASSERT_EQ(workers.workers_size(), 2);

  const std::string url = absl::StrCat("http://", *address, "/#token=", kClientToken);
  const std::string screenshot = absl::StrCat(OutputsDir(), "/status_page.png");
  absl::StatusOr<std::string> dom = DumpDom(url, "dom", screenshot);
  ASSERT_TRUE(dom.ok()) << dom.status();
  EXPECT_TRUE(absl::StrContains(*dom, "data-loaded=\"true\"")) << *dom;
  for (const v1::WorkerInfo& worker : workers.workers()) {
    EXPECT_TRUE(
        absl::StrContains(*dom, absl::StrCat("<tr class=\"worker\" data-worker-id=\"", worker.worker_id())))
        << worker.worker_id() << "\n"
        << *dom;
    EXPECT_TRUE(absl::StrContains(*dom, absl::StrCat("<div class=\"chart plan-search\" data-worker-id=\"",
                                                     worker.worker_id(), "\"><svg")))
        << worker.worker_id() << "\n"
        << *dom;
  }
  EXPECT_TRUE(absl::StrContains(
      *dom, absl::StrCat("<tr class=\"job\" data-job-id=\"", job->job_id(), "\" data-state=\"RUNNING\">")))
      << *dom;
  EXPECT_TRUE(
      absl::StrContains(*dom, absl::StrCat("<section class=\"job-detail\" data-job-id=\"", job->job_id())))
      << *dom;
  EXPECT_TRUE(absl::StrContains(*dom, "<div class=\"chart loss-curves\"><svg")) << *dom;
  EXPECT_TRUE(absl::StrContains(*dom, "training loss")) << *dom;
  EXPECT_TRUE(absl::StrContains(*dom, "<tr class=\"plan\" data-worker-id=")) << *dom;
  EXPECT_TRUE(absl::StrContains(*dom, "Updated ")) << *dom;
  EXPECT_FALSE(absl::StrContains(*dom, kClientToken)) << "the token must not end up in the page";

  // A wrong token: the login form, and not a word about the workers.
  absl::StatusOr<std::string> refused = DumpDom(absl::StrCat("http://", *address, "/#token=wrong"), "wrong");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_TRUE(absl::StrContains(*refused, "The coordinator did not accept that token.")) << *refused;
  EXPECT_FALSE(absl::StrContains(*refused, "data-worker-id")) << *refused;
  // No token at all: the login form.
  absl::StatusOr<std::string> anonymous = DumpDom(absl::StrCat("http://", *address, "/"), "anonymous");
  ASSERT_TRUE(anonymous.ok()) << anonymous.status();
  EXPECT_TRUE(absl::StrContains(*anonymous, "<form id=\"login\" autocomplete=\"off\">")) << *anonymous;
  EXPECT_FALSE(absl::StrContains(*anonymous, "data-worker-id")) << *anonymous;

  // The token is never logged, however it was sent.
  const std::string logs = cluster.Logs();
  EXPECT_FALSE(absl::StrContains(logs, kClientToken));

  struct stat info;
  ASSERT_EQ(stat(screenshot.c_str(), &info), 0) << "no screenshot at " << screenshot;
  EXPECT_GT(info.st_size, 10000) << "a screenshot of a page with tables and charts";

  v1::CancelJobRequest cancel;
  cancel.set_job_id(job->job_id());
  auto cancel_context = rpc::MakeClientContext(kClientToken, std::chrono::seconds(10));
  v1::Job cancelled;
  EXPECT_TRUE(cluster.Stub()->CancelJob(cancel_context.get(), cancel, &cancelled).ok());
}

}  // namespace
}  // namespace slimfit::testing_util
