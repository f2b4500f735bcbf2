// The operator's view of real daemons: the metrics endpoints of a coordinator and two workers after a
// job, read by the Prometheus project's own parser (tests/testdata/check_metrics.py, Debian's
// python3-prometheus-client) and checked against what the job did; sd_notify readiness, reload and
// shutdown; SIGHUP on a worker. (The loopback rule of --metrics_listen is tested with the flags.)
#include <signal.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"
#include "tests/cluster.h"
#include "tests/daemon_process.h"
#include "tests/ops_support.h"

namespace slimfit::testing_util {
namespace {

using nlohmann::json;

// What check_metrics.py read from one exposition.
struct Scrape {
  std::map<std::string, std::string> families;  // name → type (counters without "_total")
  json samples;                                 // [[name, {labels}, value], ...]

  // The sum of the values of `name`'s samples whose labels include `labels`; -1 when none matches.
  double Sum(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    double sum = 0;
    bool found = false;
    for (const json& sample : samples) {
      if (sample[0] != name) continue;
      bool match = true;
      for (const auto& [key, value] : labels) {
        match = match && sample[1].contains(key) && sample[1][key] == value;
      }
      if (!match || !sample[2].is_number()) continue;
      sum += sample[2].get<double>();
      found = true;
    }
    return found ? sum : -1;
  }
  // The label values of `label` on `name`'s samples.
  std::vector<std::string> Labels(const std::string& name, const std::string& label) const {
    std::vector<std::string> values;
    for (const json& sample : samples) {
      if (sample[0] == name && sample[1].contains(label)) values.push_back(sample[1][label]);
    }
    return values;
  }
};

// Fetches /metrics from each address, runs the independent parser over all of them.
std::vector<Scrape> ScrapeAll(const std::vector<std::string>& addresses) {
  std::vector<std::string> files;
  for (size_t i = 0; i < addresses.size(); ++i) {
    absl::StatusOr<HttpReply> reply = HttpGet(addresses[i], "/metrics");
    EXPECT_TRUE(reply.ok()) << reply.status();
    if (!reply.ok()) return {};
    EXPECT_EQ(reply->status, 200);
    EXPECT_EQ(reply->content_type, "text/plain; version=0.0.4; charset=utf-8");
    files.push_back(WriteTempFile(absl::StrCat("scrape-", i, ".txt"), reply->body));
  }
  absl::StatusOr<CommandResult> parsed = RunCommand(
      "/usr/bin/python3",
      [&] {
        std::vector<std::string> args = {RunfilePath("tests/testdata/check_metrics.py")};
        args.insert(args.end(), files.begin(), files.end());
        return args;
      }(),
      absl::Seconds(60));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return {};
  EXPECT_EQ(parsed->exit_status, 0) << parsed->err;
  if (parsed->exit_status != 0) return {};
  const json all = json::parse(parsed->out);
  std::vector<Scrape> scrapes;
  for (const std::string& file : files) {
    Scrape scrape;
    for (const auto& [name, type] : all[file]["families"].items()) scrape.families[name] = type;
    scrape.samples = all[file]["samples"];
    scrapes.push_back(std::move(scrape));
  }
  return scrapes;
}

absl::StatusOr<std::string> MetricsAddress(DaemonProcess& daemon, const MetricsEndpoint& endpoint) {
  return daemon.WaitForAddress(endpoint.port_file, absl::Seconds(30));
}

TEST(OperationsE2E, MetricsOfACoordinatorAndTwoWorkersAfterAJob) {
  Cluster cluster("ops_metrics");
  const MetricsEndpoint coordinator_metrics = MetricsFlags("coordinator");
  ASSERT_TRUE(cluster.StartCoordinator(coordinator_metrics.flags).ok()) << cluster.Logs();
  std::vector<MetricsEndpoint> worker_metrics = {MetricsFlags("worker0"), MetricsFlags("worker1")};
  for (const MetricsEndpoint& endpoint : worker_metrics) {
    WorkerOptions options;
    options.extra_flags = endpoint.flags;
    ASSERT_TRUE(cluster.StartWorker("4MiB", options).ok()) << cluster.Logs();
  }
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();
  absl::StatusOr<v1::Job> job = SubmitSmallJob(cluster, /*rounds=*/3);
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason();

  std::vector<std::string> addresses;
  absl::StatusOr<std::string> address = MetricsAddress(cluster.coordinator(), coordinator_metrics);
  ASSERT_TRUE(address.ok()) << address.status();
  addresses.push_back(*address);
  for (int i = 0; i < 2; ++i) {
    address = MetricsAddress(cluster.worker(i), worker_metrics[i]);
    ASSERT_TRUE(address.ok()) << address.status();
    addresses.push_back(*address);
  }
  const std::vector<Scrape> scrapes = ScrapeAll(addresses);
  ASSERT_EQ(scrapes.size(), 3u) << cluster.Logs();
  const Scrape& coordinator = scrapes[0];

  // Job events.
  EXPECT_EQ(coordinator.families.at("slimfit_rounds"), "counter");
  EXPECT_GT(coordinator.Sum("process_resident_memory_bytes"), 0);
  EXPECT_GE(coordinator.Sum("process_resident_memory_max_bytes"),
            coordinator.Sum("process_resident_memory_bytes"));
  EXPECT_GT(coordinator.Sum("process_cpu_seconds_total"), 0);
  EXPECT_EQ(coordinator.Sum("slimfit_rounds_total"), 3);
  EXPECT_EQ(coordinator.Sum("slimfit_round_seconds_count"), 3);
  EXPECT_GT(coordinator.Sum("slimfit_round_seconds_sum"), 0);
  EXPECT_EQ(coordinator.Sum("slimfit_tokens_trained_total"), done->progress().tokens_trained());
  EXPECT_EQ(coordinator.Sum("slimfit_evaluations_total"), 3);  // before round 1, after round 2 and the last
  EXPECT_GE(coordinator.Sum("slimfit_checkpoints_total"), 3);
  EXPECT_EQ(coordinator.Sum("slimfit_jobs_finished_total", {{"state", "SUCCEEDED"}}), 1);
  for (const char* phase : {"waiting", "shards", "aggregation", "step", "checkpoint"}) {
    EXPECT_GE(coordinator.Sum("slimfit_round_phase_seconds_total", {{"phase", phase}}), 0) << phase;
  }
  EXPECT_GE(coordinator.Sum("slimfit_shard_reassignments_total"), 0);
  // Workers, by state and one by one.
  EXPECT_EQ(coordinator.Sum("slimfit_workers", {{"state", "IDLE"}}) +
                coordinator.Sum("slimfit_workers", {{"state", "BUSY"}}),
            2);
  const std::vector<std::string> worker_ids =
      coordinator.Labels("slimfit_worker_memory_budget_bytes", "worker_id");
  ASSERT_EQ(worker_ids.size(), 2u);
  EXPECT_EQ(coordinator.Sum("slimfit_worker_memory_budget_bytes"), 2 * 4 * 1024 * 1024);
  const double attempts = coordinator.Sum("slimfit_worker_shards_total");
  EXPECT_GT(attempts, 0);
  // RPCs by method and code, bytes by method.
  EXPECT_EQ(coordinator.Sum("slimfit_rpc_server_seconds_count",
                            {{"method", "/slimfit.v1.Coordinator/SubmitJob"}, {"code", "OK"}}),
            1);
  EXPECT_GE(coordinator.Sum("slimfit_rpc_server_seconds_count",
                            {{"method", "/slimfit.v1.Coordinator/RegisterWorker"}, {"code", "OK"}}),
            2);
  EXPECT_GT(coordinator.Sum("slimfit_rpc_server_sent_bytes_total",
                            {{"method", "/slimfit.v1.Coordinator/FetchParameters"}}),
            0);
  EXPECT_GT(coordinator.Sum("slimfit_rpc_server_received_bytes_total",
                            {{"method", "/slimfit.v1.Coordinator/UploadDataset"}}),
            30000 - 1);

  // Each worker: its identity, budget, engine time and the RPCs it served.
  double computed = 0;
  for (int i = 1; i <= 2; ++i) {
    const Scrape& worker = scrapes[i];
    const std::vector<std::string> ids = worker.Labels("slimfit_worker_info", "worker_id");
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_NE(std::find(worker_ids.begin(), worker_ids.end(), ids[0]), worker_ids.end()) << ids[0];
    EXPECT_EQ(worker.Sum("slimfit_memory_budget_bytes"), 4 * 1024 * 1024);
    EXPECT_GE(worker.Sum("slimfit_parameter_cache_bytes"), 0);
    // The process: it holds at least its parameter cache, and computed for a while.
    EXPECT_GT(worker.Sum("process_resident_memory_bytes"), worker.Sum("slimfit_parameter_cache_bytes"));
    EXPECT_GT(worker.Sum("process_cpu_seconds_total"), 0);
    EXPECT_EQ(worker.families.at("process_cpu_seconds"), "counter");
    const double shards = worker.Sum("slimfit_engine_seconds_count");
    EXPECT_EQ(worker.Sum("slimfit_rpc_server_seconds_count",
                         {{"method", "/slimfit.v1.Worker/ComputeGradient"}, {"code", "OK"}}),
              shards);
    if (shards > 0) {
      EXPECT_GT(worker.Sum("slimfit_peak_bytes_max"), 0);
      EXPECT_LE(worker.Sum("slimfit_peak_bytes_max"), 4 * 1024 * 1024);
      EXPECT_GT(worker.Sum("slimfit_rpc_server_sent_bytes_total",
                           {{"method", "/slimfit.v1.Worker/ComputeGradient"}}),
                0);
    }
    computed += shards;
  }
  // Every attempt the coordinator counted was computed by a worker's engine, and nothing else was.
  EXPECT_EQ(computed, attempts) << cluster.Logs();
}

TEST(OperationsE2E, DaemonsTellSystemdWhenTheyAreReadyAndStopping) {
  FakeNotifySocket systemd;
  ASSERT_TRUE(systemd.bound());
  Cluster cluster("ops_notify");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  std::string seen = systemd.ReceiveUntil("READY=1", absl::Seconds(10));
  EXPECT_TRUE(absl::StrContains(seen, absl::StrCat("READY=1\nSTATUS=serving on ", cluster.address())))
      << seen;

  cluster.coordinator().Signal(SIGHUP);
  seen = systemd.ReceiveUntil("READY=1", absl::Seconds(10));
  EXPECT_TRUE(absl::StrContains(seen, "RELOADING=1")) << seen;
  EXPECT_TRUE(absl::StrContains(seen, "READY=1")) << seen;

  ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  seen = systemd.ReceiveUntil("registered as w-", absl::Seconds(30));
  EXPECT_TRUE(absl::StrContains(seen, "READY=1\nSTATUS=serving on 127.0.0.1:")) << seen;
  EXPECT_TRUE(absl::StrContains(seen, "STATUS=registered as w-")) << seen;

  // SIGHUP leaves a worker serving; SIGTERM drains it.
  cluster.worker(0).Signal(SIGHUP);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE(cluster.worker(0).running()) << cluster.Logs();
  EXPECT_TRUE(cluster.WaitForLiveWorkers(1, absl::Seconds(10)).ok()) << cluster.Logs();
  cluster.worker(0).Signal(SIGTERM);
  seen = systemd.ReceiveUntil("STOPPING=1", absl::Seconds(30));
  EXPECT_TRUE(absl::StrContains(seen, "STOPPING=1\nSTATUS=draining (SIGTERM)")) << seen;
  absl::StatusOr<int> exit_status = cluster.worker(0).Wait(absl::Seconds(30));
  ASSERT_TRUE(exit_status.ok()) << exit_status.status();
  EXPECT_EQ(*exit_status, 0) << cluster.Logs();
  absl::StatusOr<std::string> log = base::ReadFileToString(cluster.worker(0).log_path());
  ASSERT_TRUE(log.ok());
  EXPECT_TRUE(absl::StrContains(*log, "SIGHUP: nothing to re-read")) << *log;

  cluster.coordinator().Signal(SIGTERM);
  seen = systemd.ReceiveUntil("STOPPING=1", absl::Seconds(30));
  EXPECT_TRUE(absl::StrContains(seen, "STOPPING=1\nSTATUS=SIGTERM")) << seen;
  exit_status = cluster.coordinator().Wait(absl::Seconds(30));
  ASSERT_TRUE(exit_status.ok());
  EXPECT_EQ(*exit_status, 0);
}

}  // namespace
}  // namespace slimfit::testing_util
