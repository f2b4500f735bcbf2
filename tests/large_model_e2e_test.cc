// End to end at a real size: a model whose large tensors are 9 MiB each (nine 1 MiB chunks on the
// wire, both ways), trained by three workers on different plans with several shards each, equals
// the same rounds in one process — with each shard's gradient assembled before it is summed, and
// with every shard summed chunk by chunk as it arrives (--stream_into_sum_bytes=0) and AdamW's
// moments and spot-checked results kept in files (--offload_dir).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "performer/performer_model.h"
#include "planner/plan_proto.h"
#include "tests/cluster.h"
#include "tests/e2e_support.h"

namespace slimfit {
namespace {

using testing_util::AllEvents;
using testing_util::Cluster;

// d_model 1536: the q, k, v and both feed-forward maps are 1536 × 1536 floats, 9 MiB each.
v1::JobSpec LargeSpec(const std::string& dataset) {
  v1::JobSpec spec;
  spec.set_name("large");
  v1::ModelConfig* model = spec.mutable_model()->mutable_config();
  model->set_d_model(1536);
  model->set_layers(1);
  model->set_heads(12);
  model->set_d_ff(1536);
  spec.add_dataset_ids(dataset);
  spec.set_sequence_length(256);
  spec.set_tokens_per_round(256 * 6);
  spec.set_rounds(2);
  spec.mutable_optimizer()->mutable_adamw();
  spec.mutable_optimizer()->set_learning_rate(1e-3);
  spec.set_checkpoint_interval_rounds(1);
  spec.set_seed(3);
  return spec;
}

// Mappings of the coordinator's memory that are files in `directory` (an unnamed file shows as
// "<directory>/#<inode> (deleted)").
int MappedFilesIn(pid_t pid, const std::string& directory) {
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(" " + directory + "/") != std::string::npos) ++count;
  }
  return count;
}

// `streams`: every shard not spot-checked is summed as it arrives (else every shard is assembled).
// `offload_dir`: the coordinator's --offload_dir (empty: none).
void ExpectEqualsOneProcess(const std::string& name, const std::vector<std::string>& coordinator_flags,
                            bool streams, const std::string& offload_dir = "") {
  Cluster cluster(name);
  if (!offload_dir.empty()) {
    // A directory that cannot hold them stops the start, saying which flag.
    EXPECT_FALSE(cluster.StartCoordinator({"--offload_dir=/nonexistent/moments"}).ok());
    EXPECT_THAT(cluster.Logs(), ::testing::HasSubstr("--offload_dir: /nonexistent/moments"));
    std::filesystem::create_directories(offload_dir);
  }
  // One sequence per shard: six shards a round, two or so per worker.
  std::vector<std::string> flags = {"--max_sequences_per_shard=1"};
  flags.insert(flags.end(), coordinator_flags.begin(), coordinator_flags.end());
  if (!offload_dir.empty()) flags.push_back("--offload_dir=" + offload_dir);
  ASSERT_TRUE(cluster.StartCoordinator(flags).ok()) << cluster.Logs();
  // Parameters, their gradient and the running sum take ~124 MiB; the rest decides the plan: a
  // short slice, a long one, full back-propagation.
  for (const char* budget : {"148MiB", "160MiB", "1GiB"}) {
    ASSERT_TRUE(cluster.StartWorker(budget).ok()) << cluster.Logs();
  }
  ASSERT_TRUE(cluster.WaitForLiveWorkers(3, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = testing_util::Corpus(20000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();

  v1::JobSpec spec = LargeSpec(*dataset);
  // Offloading: spot checks too, whose held results wait in files.
  if (!offload_dir.empty()) spec.set_verify_fraction(0.25);
  absl::StatusOr<performer::ModelConfig> config = planner::ModelConfigFromProto(spec.model().config(), "m");
  ASSERT_TRUE(config.ok());
  for (const std::vector<int64_t>& shape : performer::ParameterShapes(*config)) {
    if (shape.size() == 2 && shape[0] == 1536 && shape[1] == 1536) {
      EXPECT_EQ(shape[0] * shape[1] * 4, 9 << 20);  // 9 MiB: nine chunks
    }
  }
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  if (!offload_dir.empty()) {
    // Two files per parameter tensor (both moments) while the job runs.
    const int want = 2 * static_cast<int>(performer::ParameterNames(*config).size());
    int mapped = 0;
    for (int i = 0; i < 1200 && mapped < want; ++i) {
      mapped = std::max(mapped, MappedFilesIn(cluster.coordinator().pid(), offload_dir));
      absl::StatusOr<v1::Job> now = cluster.GetJob(job->job_id());
      if (!now.ok() || now->state() >= v1::JOB_STATE_SUCCEEDED) break;  // terminal
      absl::SleepFor(absl::Milliseconds(200));
    }
    EXPECT_GE(mapped, want) << cluster.Logs();  // more while a spot check's results wait in files
  }
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(240));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();

  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, job->job_id(), spec, text, std::string("\n\n")),
            1e-5);

  std::set<std::string> plans;
  int max_shards = 0, workers = 0, shards = 0, checked = 0, streamed = 0;
  for (const v1::JobEvent& event : AllEvents(cluster, job->job_id())) {
    if (event.has_worker_plan_changed())
      plans.insert(
          planner::PlanSummary(*planner::PlanFromProto(event.worker_plan_changed().plan().plan(), "plan")));
    if (event.has_round_completed()) {
      max_shards = std::max(max_shards, event.round_completed().shards());
      workers = std::max(workers, event.round_completed().workers());
      EXPECT_EQ(event.round_completed().reassigned_shards(), 0) << cluster.Logs();
      EXPECT_EQ(event.round_completed().recomputations(), 0) << cluster.Logs();
      shards += event.round_completed().shards();
      checked += event.round_completed().verified_shards();
      streamed += event.round_completed().streamed_shards();
    }
  }
  EXPECT_EQ(plans.size(), 3u) << ::testing::PrintToString(plans) << cluster.Logs();
  EXPECT_EQ(max_shards, 6);
  EXPECT_EQ(workers, 3);
  EXPECT_EQ(streamed, streams ? shards - checked : 0) << shards << " shards, " << checked << " checked";
  if (!offload_dir.empty()) {
    EXPECT_GT(checked, 0);
  }
}

TEST(LargeModelEndToEndTest, NineMiBTensorsOnThreePlansEqualOneProcess) {
  ExpectEqualsOneProcess("large", {"--stream_into_sum_bytes=1TiB"}, /*streams=*/false);
}

TEST(LargeModelEndToEndTest, NineMiBTensorsSummedAsTheyArriveAndOffloadedEqualOneProcess) {
  ExpectEqualsOneProcess("large_streamed", {"--stream_into_sum_bytes=0"}, /*streams=*/true,
                         ::testing::TempDir() + "moments");
}

}  // namespace
}  // namespace slimfit
