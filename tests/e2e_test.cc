// End to end: a real coordinator and real workers on loopback, driven through the public gRPC
// API. A job's final parameters equal a single-process run of the same rounds (aggregation is
// exact), whatever plan each worker runs, when a worker is killed mid-round, and when the
// coordinator is killed and restarted mid-job; bad requests get precise errors.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/test_util.h"
#include "performer/gradient_engine.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/safetensors.h"
#include "performer/trainer.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "rpc/standard_services.h"
#include "server/job_data.h"
#include "tests/cluster.h"
#include "tests/e2e_support.h"

namespace slimfit {
namespace {

using ::testing::HasSubstr;
using testing_util::AllEvents;
using testing_util::BusyJob;
using testing_util::Cluster;
using testing_util::Corpus;
using testing_util::CountReassigned;
using testing_util::Spec;
using testing_util::StartJobAndFindBusyWorker;

// The exported parameters of a finished job against a single-process run of the same rounds.
void ExpectSameAsSingleProcess(Cluster& cluster, const std::string& job_id, const v1::JobSpec& spec,
                               const std::string& text, const std::optional<std::string>& separator) {
  EXPECT_LE(testing_util::DistanceFromSingleProcess(cluster, job_id, spec, text, separator), 1e-5);
}

TEST(EndToEndTest, JobEqualsSingleProcessTrainingWhateverEachWorkerRuns) {
  Cluster cluster("exact");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  // Budgets that make the planner pick C = 32, C = 64 and full back-propagation.
  for (const char* budget : {"700KiB", "800KiB", "4MiB"})
    ASSERT_TRUE(cluster.StartWorker(budget).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(3, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = Corpus(24000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  // Uploading the same bytes again is idempotent.
  EXPECT_EQ(*cluster.UploadText(text, std::string("\n\n")), *dataset);

  const v1::JobSpec spec = Spec(*dataset, 32, 64, 128, 12, 4);
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_EQ(done->progress().rounds_completed(), 4);
  EXPECT_TRUE(done->progress().has_eval_bits_per_byte());

  ExpectSameAsSingleProcess(cluster, job->job_id(), spec, text, std::string("\n\n"));

  // Each worker ran the plan that fits it: at least two different slice sizes were assigned;
  // every round and evaluation was reported, in order.
  std::set<int64_t> slices;
  int64_t rounds = 0, evaluations = 0, reassigned = 0, last_sequence = 0;
  absl::StatusOr<performer::ModelConfig> config =
      planner::ModelConfigFromProto(spec.model().config(), "model");
  ASSERT_TRUE(config.ok()) << config.status();
  for (const v1::JobEvent& event : AllEvents(cluster, job->job_id())) {
    if (!event.has_snapshot()) {
      EXPECT_GT(event.sequence(), last_sequence);
      last_sequence = event.sequence();
    }
    if (event.has_worker_plan_changed()) slices.insert(event.worker_plan_changed().plan().plan().slice());
    rounds += event.has_round_completed() ? 1 : 0;
    evaluations += event.has_evaluation() ? 1 : 0;
    reassigned += event.has_shard_reassigned() ? 1 : 0;
    if (event.has_round_completed()) {
      // Where the round's time and bytes went, as measured: every round ran shards, its workers
      // computed, fetched the version and streamed gradients of the whole model back, and the
      // coordinator stepped the optimizer.
      const v1::RoundCompleted& round = event.round_completed();
      const v1::RoundTiming& timing = round.timing();
      EXPECT_GT(timing.shards_seconds(), 0) << round.ShortDebugString();
      EXPECT_GT(timing.worker_compute_seconds(), 0) << round.ShortDebugString();
      EXPECT_GT(timing.worker_fetch_seconds(), 0) << round.ShortDebugString();
      EXPECT_GT(timing.worker_stream_seconds(), 0) << round.ShortDebugString();
      EXPECT_GT(timing.step_seconds(), 0) << round.ShortDebugString();
      // The dispatcher's parts lie inside the round (its time runs to the optimizer step; the step
      // part goes on through publishing the new version).
      EXPECT_LE(timing.waiting_seconds() + timing.shards_seconds() + timing.aggregation_seconds(),
                round.round_seconds())
          << round.ShortDebugString();
      // Each worker that took a shard fetched this version once (float32: 4 bytes a parameter), and
      // each shard's gradient came back whole.
      const int64_t parameter_bytes = 4 * config->parameter_count();
      EXPECT_GE(timing.bytes_to_workers(), parameter_bytes) << round.ShortDebugString();
      EXPECT_GE(timing.bytes_from_workers(), round.shards() * parameter_bytes) << round.ShortDebugString();
    }
    if (event.has_checkpoint_written()) {
      EXPECT_GT(event.checkpoint_written().seconds(), 0);
    }
  }
  EXPECT_GE(slices.size(), 2u) << cluster.Logs();
  // The coordinator's plans and the workers' own budget checks agree: no shard was refused.
  EXPECT_EQ(reassigned, 0) << cluster.Logs();
  EXPECT_EQ(rounds, 4);
  EXPECT_EQ(evaluations, 3);  // before round 1, after round 2 and after round 4
}

// A job with bfloat16 products (JobSpec.bf16_products): every worker's plan has them, every shard is
// computed twice by workers running different plans (C = 32 and full back-propagation), whose
// results agree to the bfloat16 tolerance of the spot checks (no one is quarantined), and the model
// is a single-process bfloat16 training of the same rounds to bfloat16 rounding.
TEST(EndToEndTest, Bf16ProductsJobRunsThemOnEveryWorkerAndItsSpotChecksAgree) {
  Cluster cluster("bf16");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (const char* budget : {"700KiB", "4MiB"})
    ASSERT_TRUE(cluster.StartWorker(budget).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = Corpus(16000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string("\n\n"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  v1::JobSpec spec = Spec(*dataset, 32, 64, 128, 4, 3);
  spec.set_bf16_products(true);
  spec.set_verify_fraction(1.0);
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status() << cluster.Logs();
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  std::set<int64_t> slices;
  int64_t verified = 0, quarantined = 0;
  for (const v1::JobEvent& event : AllEvents(cluster, job->job_id())) {
    if (event.has_worker_plan_changed()) {
      const v1::Plan& plan = event.worker_plan_changed().plan().plan();
      EXPECT_TRUE(plan.bf16_products()) << plan.ShortDebugString();
      slices.insert(plan.slice());
    }
    if (event.has_round_completed()) verified += event.round_completed().verified_shards();
    quarantined += event.has_worker_quarantined() ? 1 : 0;
  }
  EXPECT_EQ(slices.size(), 2u) << cluster.Logs();
  EXPECT_GT(verified, 0);
  EXPECT_EQ(quarantined, 0) << cluster.Logs();
  const double distance =
      testing_util::DistanceFromSingleProcess(cluster, job->job_id(), spec, text, std::string("\n\n"));
  EXPECT_LT(distance, 1e-2);
  // ... and not float32 training, which a float32 job matches to 1e-5 (the test above): the workers
  // did round their products. (Which worker's result of a verified shard is summed varies from run
  // to run, so the distance to bfloat16 training does too: 1e-6 to 1e-4 seen.)
  v1::JobSpec float32 = spec;
  float32.set_bf16_products(false);
  const double from_float32 =
      testing_util::DistanceFromSingleProcess(cluster, job->job_id(), float32, text, std::string("\n\n"));
  EXPECT_GT(from_float32, 1e-5);
  EXPECT_LT(distance, from_float32);
  std::cout << "bfloat16 job: " << verified << " shards verified; distance from single-process training "
            << distance << " (bfloat16), " << from_float32 << " (float32)\n";
}

TEST(EndToEndTest, WorkerKilledMidRoundChangesNothing) {
  Cluster cluster("killed_worker");
  BusyJob job;
  ASSERT_NO_FATAL_FAILURE(StartJobAndFindBusyWorker(cluster, 5, &job));
  cluster.worker(job.busy_worker).Signal(SIGKILL);
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job.job_id, absl::Seconds(180));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_GE(CountReassigned(cluster, job.job_id), 1) << cluster.Logs();
  ExpectSameAsSingleProcess(cluster, job.job_id, job.spec, job.text, std::nullopt);
}

TEST(EndToEndTest, FrozenWorkerIsDroppedWhenItStopsHeartbeating) {
  Cluster cluster("frozen_worker");
  BusyJob job;
  ASSERT_NO_FATAL_FAILURE(StartJobAndFindBusyWorker(cluster, 4, &job));
  // SIGSTOP keeps the connection open: only the missing heartbeats (lost after 1.5 s here) tell
  // the coordinator, which must cancel the call instead of waiting for the shard's deadline (60 s).
  const absl::Time frozen_at = absl::Now();
  cluster.worker(job.busy_worker).Signal(SIGSTOP);
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job.job_id, absl::Seconds(50));
  cluster.worker(job.busy_worker).Signal(SIGCONT);
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_LT(absl::Now() - frozen_at, absl::Seconds(40));
  EXPECT_GE(CountReassigned(cluster, job.job_id), 1) << cluster.Logs();
  ExpectSameAsSingleProcess(cluster, job.job_id, job.spec, job.text, std::nullopt);
}

TEST(EndToEndTest, CoordinatorRestartedMidJobResumesAndFinishes) {
  Cluster cluster("restart");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = Corpus(40000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::nullopt);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const v1::JobSpec spec = Spec(*dataset, 32, 64, 256, 24, 10);
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();

  // Kill the coordinator without warning once a few rounds are done.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  int64_t completed = 0;
  while (absl::Now() < deadline && completed < 3) {
    absl::StatusOr<v1::Job> now = cluster.GetJob(job->job_id());
    if (now.ok()) completed = now->progress().rounds_completed();
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(completed, 3) << cluster.Logs();
  cluster.coordinator().Signal(SIGKILL);
  ASSERT_TRUE(cluster.coordinator().Wait(absl::Seconds(10)).ok());
  // What a kill while a checkpoint was being written leaves: files no checkpoint record names.
  const std::string job_dir = absl::StrCat(cluster.coordinator_state_dir(), "/jobs/", job->job_id());
  const std::vector<std::string> unrecorded = {job_dir + "/round-999999.safetensors",
                                               job_dir + "/round-999999.optimizer.safetensors.tmp"};
  for (const std::string& path : unrecorded)
    ASSERT_TRUE(base::WriteFileAtomically(path, "partial").ok()) << path;
  // Restarted with AdamW's moments offloaded to files: the checkpoint's moments, written from
  // memory, move there and the job goes on exactly.
  const std::string offload_dir = ::testing::TempDir() + "restart-offload";
  std::filesystem::create_directories(offload_dir);
  ASSERT_TRUE(cluster.StartCoordinator({"--offload_dir=" + offload_dir}).ok()) << cluster.Logs();

  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(180));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_EQ(done->progress().rounds_completed(), 10);
  ExpectSameAsSingleProcess(cluster, job->job_id(), spec, text, std::nullopt);
  // Parameter versions were never reused: the restart skipped ahead.
  EXPECT_GT(done->progress().parameter_version(), 11u);
  for (const std::string& path : unrecorded) EXPECT_FALSE(std::filesystem::exists(path)) << path;
  EXPECT_TRUE(std::filesystem::exists(job_dir + "/round-000010.safetensors"));
  // The restart says so (JobResumed), and progress as clients see it never went back: the rounds
  // computed again after it are marked as such.
  int resumes = 0;
  int64_t highest = 0;
  for (const v1::JobEvent& event : AllEvents(cluster, job->job_id())) {
    if (event.has_resumed()) {
      ++resumes;
      EXPECT_EQ(event.resumed().reason(), v1::JobResumed::REASON_COORDINATOR_RESTART);
      // At least the rounds whose events were out (a kill between storing a round's progress
      // and its event leaves one more).
      EXPECT_GE(event.resumed().rounds_completed(), highest) << event.ShortDebugString();
      EXPECT_LE(event.resumed().round(), event.resumed().rounds_completed()) << event.ShortDebugString();
      EXPECT_EQ(event.resumed().unverifiable_checkpoints_size(), 0) << event.ShortDebugString();
      highest = std::max(highest, event.resumed().rounds_completed());
    } else if (event.has_round_completed()) {
      const int64_t round = event.round_completed().round();
      EXPECT_EQ(event.round_completed().rerun(), round <= highest) << event.ShortDebugString();
      highest = std::max(highest, round);
    }
  }
  EXPECT_EQ(resumes, 1);
  EXPECT_THAT(cluster.Logs(),
              HasSubstr(absl::StrCat(job->job_id(), ": AdamW's moments are kept in files in ", offload_dir)));
}

// The `slimfit` CLI against the real daemons: submit with --watch, status, workers, plan --all,
// export, and its exit codes.
TEST(EndToEndTest, CliDrivesAJobFromSubmitToExport) {
  Cluster cluster("cli");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker("1MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker("8MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string data = testing_util::TempPath("cli-corpus.txt");
  {
    std::ofstream out(data);
    out << Corpus(12000);
  }
  const std::string slimfit = testing_util::RunfilePath("client/slimfit");
  const std::vector<std::string> connection = {absl::StrCat("--coordinator=", cluster.address()),
                                               absl::StrCat("--token=", testing_util::kClientToken)};
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.end(), connection.begin(), connection.end());
    absl::StatusOr<testing_util::CommandResult> result =
        testing_util::RunCommand(slimfit, args, absl::Seconds(120));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : testing_util::CommandResult();
  };

  testing_util::CommandResult submitted =
      run({"submit", absl::StrCat("--data=", data), "--separator=\\n\\n", "--d_model=32", "--layers=2",
           "--heads=2", "--d_ff=64", "--sequence_length=128", "--tokens_per_round=1024", "--rounds=3",
           "--learning_rate=1e-3", "--held_out_fraction=0.1", "--name=cli-job", "--watch"});
  EXPECT_EQ(submitted.exit_status, 0) << submitted.out << submitted.err << cluster.Logs();
  EXPECT_THAT(submitted.out, HasSubstr("SUCCEEDED"));
  EXPECT_THAT(submitted.out, HasSubstr("round 3/3"));

  testing_util::CommandResult status = run({"status", "job-000001"});
  EXPECT_EQ(status.exit_status, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("SUCCEEDED"));
  EXPECT_THAT(status.out, HasSubstr("cli-job"));
  // The loss curves of the finished job, read from the coordinator's retained events.
  const std::string curves = testing_util::TempPath("cli-loss.svg");
  testing_util::CommandResult drawn = run({"status", "job-000001", "--svg=" + curves});
  EXPECT_EQ(drawn.exit_status, 0) << drawn.err;
  absl::StatusOr<std::string> svg = base::ReadFileToString(curves);
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_THAT(*svg, HasSubstr(">training loss<"));
  EXPECT_THAT(*svg, HasSubstr("<polyline"));

  testing_util::CommandResult plans = run({"plan", "--all", "--job=job-000001"});
  EXPECT_EQ(plans.exit_status, 0) << plans.err;
  EXPECT_THAT(plans.out, HasSubstr("C = "));  // the 1 MiB worker slices
  testing_util::CommandResult workers = run({"workers"});
  EXPECT_EQ(workers.exit_status, 0) << workers.err;
  EXPECT_THAT(workers.out, HasSubstr("1.0 MiB"));

  const std::string exported = testing_util::TempPath("cli-export.safetensors");
  testing_util::CommandResult exporting = run({"export", "job-000001", absl::StrCat("--out=", exported)});
  EXPECT_EQ(exporting.exit_status, 0) << exporting.err;
  absl::StatusOr<performer::TensorFile> file = performer::ReadSafetensors(exported);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata.at("round"), "3");

  testing_util::CommandResult unknown = run({"status", "job-424242"});
  EXPECT_EQ(unknown.exit_status, 2);
  EXPECT_THAT(unknown.err, HasSubstr("job-424242"));
  EXPECT_EQ(std::count(unknown.err.begin(), unknown.err.end(), '\n'), 1) << unknown.err;
  std::vector<std::string> wrong_token = {"jobs", absl::StrCat("--coordinator=", cluster.address()),
                                          "--token=nope"};
  absl::StatusOr<testing_util::CommandResult> denied =
      testing_util::RunCommand(slimfit, wrong_token, absl::Seconds(30));
  ASSERT_TRUE(denied.ok());
  EXPECT_EQ(denied->exit_status, 2);
  EXPECT_THAT(denied->err, HasSubstr("token"));
}

// Generic gRPC tools can talk to both daemons: the standard health service reports each daemon's
// own service SERVING once it is ready (a worker: once registered), and reflection lists it.
TEST(EndToEndTest, DaemonsAnswerHealthChecksAndReflection) {
  Cluster cluster("health");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(1, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::vector<std::pair<std::string, std::string>> daemons = {
      {cluster.address(), "slimfit.v1.Coordinator"}, {cluster.worker_address(0), "slimfit.v1.Worker"}};
  for (const auto& [address, service] : daemons) {
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    absl::StatusOr<rpc::HealthStatus> health = rpc::CheckHealth(channel, service, absl::Seconds(10));
    ASSERT_TRUE(health.ok()) << address << ": " << health.status();
    EXPECT_EQ(*health, rpc::HealthStatus::kServing) << service;
    EXPECT_EQ(rpc::CheckHealth(channel, "", absl::Seconds(10)).value_or(rpc::HealthStatus::kUnknown),
              rpc::HealthStatus::kServing);
    absl::StatusOr<std::vector<std::string>> services =
        rpc::ListServicesByReflection(channel, absl::Seconds(10));
    ASSERT_TRUE(services.ok()) << address << ": " << services.status();
    EXPECT_THAT(*services, ::testing::Contains(service));
    EXPECT_THAT(*services, ::testing::Contains("grpc.health.v1.Health"));
  }
}

TEST(EndToEndTest, BadRequestsGetPreciseErrors) {
  Cluster cluster("errors");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker("2MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(1, absl::Seconds(30)).ok()) << cluster.Logs();
  absl::StatusOr<std::string> dataset = cluster.UploadText(Corpus(5000), std::nullopt);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const v1::JobSpec good = Spec(*dataset, 32, 64, 128, 4, 2);

  absl::Status wrong_token = cluster.Submit(good, "not-the-token").status();
  EXPECT_EQ(wrong_token.code(), absl::StatusCode::kUnauthenticated) << wrong_token;
  absl::Status worker_token = cluster.Submit(good, testing_util::kWorkerToken).status();
  EXPECT_EQ(worker_token.code(), absl::StatusCode::kPermissionDenied) << worker_token;

  v1::JobSpec malformed = good;
  malformed.set_rounds(0);
  absl::Status status = cluster.Submit(malformed).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("spec.rounds"));
  malformed = good;
  malformed.mutable_model()->mutable_config()->set_d_model(30);
  EXPECT_THAT(cluster.Submit(malformed).status().message(), HasSubstr("spec.model.config"));
  malformed = good;
  malformed.mutable_optimizer()->clear_kind();
  EXPECT_THAT(cluster.Submit(malformed).status().message(), HasSubstr("spec.optimizer.kind"));
  malformed = good;
  malformed.set_verify_fraction(1.5);
  EXPECT_THAT(cluster.Submit(malformed).status().message(),
              HasSubstr("spec.verify_fraction: must be in [0, 1]"));
  malformed = good;
  malformed.set_quarantine_after(0);
  EXPECT_THAT(cluster.Submit(malformed).status().message(), HasSubstr("spec.quarantine_after"));
  malformed = good;
  malformed.set_dataset_ids(0, "ds-nope");
  EXPECT_EQ(cluster.Submit(malformed).status().code(), absl::StatusCode::kNotFound);

  absl::Status unknown = cluster.GetJob("job-999999").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("job-999999"));

  v1::JobSpec too_long = good;
  too_long.set_sequence_length(8192);
  too_long.set_tokens_per_round(8192);
  status = cluster.Submit(too_long).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("training tokens; sequence_length is 8192"));

  v1::JobSpec too_big = good;
  too_big.mutable_model()->mutable_config()->set_d_model(512);
  too_big.mutable_model()->mutable_config()->set_d_ff(2048);
  status = cluster.Submit(too_big).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("needs at least"));
  EXPECT_THAT(status.message(), HasSubstr("at C = 1"));

  // GetMemoryPlan names the request field it refuses, before any plan search runs. The documents
  // case was found by fuzzing (coordinator_requests): the plan search's own refusal named none.
  const auto memory_plan = [&](const v1::GetMemoryPlanRequest& request) {
    auto context = rpc::MakeClientContext(testing_util::kClientToken, std::chrono::seconds(30));
    v1::GetMemoryPlanResponse response;
    return rpc::FromGrpcStatus(cluster.Stub()->GetMemoryPlan(context.get(), request, &response),
                               "GetMemoryPlan", context.get());
  };
  v1::GetMemoryPlanRequest plan_request;
  plan_request.set_all_workers(true);
  *plan_request.mutable_spec()->mutable_model() = good.model();
  plan_request.mutable_spec()->set_sequence_length(64);
  plan_request.mutable_spec()->set_documents(64);
  status = memory_plan(plan_request);  // one token per document: the most there can be
  ASSERT_TRUE(status.ok()) << status;
  plan_request.mutable_spec()->set_documents(65);
  status = memory_plan(plan_request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("spec.documents: must be between 1 and spec.sequence_length (64), got 65"));
  plan_request.mutable_spec()->set_documents(0);
  EXPECT_THAT(memory_plan(plan_request).message(), HasSubstr("spec.documents"));
  plan_request.mutable_spec()->clear_documents();
  plan_request.mutable_spec()->set_sequence_length(0);
  EXPECT_THAT(memory_plan(plan_request).message(), HasSubstr("spec.sequence_length"));
}

}  // namespace
}  // namespace slimfit
