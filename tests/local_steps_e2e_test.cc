// End to end with real processes: local-steps jobs (JobSpec.local_steps) against what they must
// reduce to, exactly, and what stays on the workers.
//   - H = 1 with plain SGD inside and outside (learning rate 1, no momentum) is synchronous SGD:
//     three workers on different plans give the parameters one process gives;
//   - one worker with H inner AdamW steps and that outer step is synchronous AdamW over H times the
//     rounds: the inner optimizer's moments and warm-up carry from round to round on the worker;
//   - the default (DiLoCo's outer Nesterov SGD) trains, the inner state lives in the worker's state
//     directory while the job runs and is dropped when it ends.
//   - workers join a running job and leave it, and it goes on;
//   - int8 pseudo-gradients and int8 parameter differences train about as well as exact updates
//     for a quarter of the bytes, and every worker rebuilds the coordinator's parameters bit for
//     bit (a mismatch would make it log and fetch them whole).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/cluster.h"
#include "tests/e2e_support.h"

namespace slimfit {
namespace {

using testing_util::AllEvents;
using testing_util::Cluster;
using testing_util::Corpus;
using testing_util::RunToSuccess;
using testing_util::Spec;

const char kSeparator[] = "\n\n";

v1::Optimizer PlainSgd(double learning_rate) {
  v1::Optimizer sgd;
  sgd.mutable_sgd()->set_momentum(0);  // explicitly none: a local-steps job's outer SGD defaults to 0.9
  sgd.set_learning_rate(learning_rate);
  sgd.set_warmup_steps(0);
  return sgd;
}

TEST(LocalStepsEndToEndTest, OneInnerStepOfPlainSgdIsSynchronousSgd) {
  Cluster cluster("local-h1");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  // Budgets that make the planner pick different plans (sliced and full back-propagation).
  for (const char* budget : {"700KiB", "800KiB", "4MiB"})
    ASSERT_TRUE(cluster.StartWorker(budget).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(3, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = Corpus(24000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string(kSeparator));
  ASSERT_TRUE(dataset.ok()) << dataset.status();

  v1::JobSpec synchronous = Spec(*dataset, 32, 64, 128, 12, 4);
  *synchronous.mutable_optimizer() = PlainSgd(0.1);
  v1::JobSpec local = synchronous;
  local.set_local_steps(1);
  *local.mutable_outer_optimizer() = PlainSgd(1.0);
  const std::string job_id = RunToSuccess(cluster, local).job_id();
  ASSERT_FALSE(job_id.empty());

  // Each worker's weighted pseudo-gradient is its share of the round's mean-loss gradient times the
  // learning rate; their sum, applied at rate 1, is the synchronous step (up to float32 rounding).
  EXPECT_LE(
      testing_util::DistanceFromSingleProcess(cluster, job_id, synchronous, text, std::string(kSeparator)),
      1e-5);
  int rounds = 0, workers = 0;
  for (const v1::JobEvent& event : AllEvents(cluster, job_id)) {
    if (!event.has_round_completed()) continue;
    ++rounds;
    workers = std::max(workers, event.round_completed().workers());
  }
  EXPECT_EQ(rounds, 4);
  EXPECT_EQ(workers, 3) << cluster.Logs();  // every worker took part: not a one-worker test
  // The job counts its bytes on the wire: at least the model to and a result from each worker per round.
  absl::StatusOr<v1::Job> done = cluster.GetJob(job_id);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_GT(done->progress().bytes_to_workers(), 0);
  EXPECT_GT(done->progress().bytes_from_workers(), done->progress().bytes_to_workers() / 2);
}

TEST(LocalStepsEndToEndTest, OneWorkersInnerStepsAreSynchronousStepsOverTheSameBatches) {
  Cluster cluster("local-carry");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  // AdamW's inner state takes four copies of the parameters beside the plan.
  ASSERT_TRUE(cluster.StartWorker("2MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(1, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = Corpus(24000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string(kSeparator));
  ASSERT_TRUE(dataset.ok()) << dataset.status();

  // 2 rounds of 3 inner AdamW steps (warm-up, clipping, weight decay) vs 6 synchronous rounds.
  constexpr int kInner = 3;
  v1::JobSpec local = Spec(*dataset, 32, 64, 128, 4, 2);
  local.set_local_steps(kInner);
  *local.mutable_outer_optimizer() = PlainSgd(1.0);
  const std::string job_id = RunToSuccess(cluster, local).job_id();
  ASSERT_FALSE(job_id.empty());

  v1::JobSpec synchronous = Spec(*dataset, 32, 64, 128, 4, 2 * kInner);
  EXPECT_LE(
      testing_util::DistanceFromSingleProcess(cluster, job_id, synchronous, text, std::string(kSeparator)),
      1e-5);
}

TEST(LocalStepsEndToEndTest, DefaultOuterOptimizerTrainsAndInnerStateStaysOnTheWorkers) {
  Cluster cluster("local-default");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = Corpus(24000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string(kSeparator));
  ASSERT_TRUE(dataset.ok()) << dataset.status();

  v1::JobSpec spec = Spec(*dataset, 32, 64, 128, 4, 4);
  spec.set_local_steps(5);
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  // The stored job shows what runs: DiLoCo's outer optimizer, no spot checks.
  EXPECT_TRUE(job->spec().outer_optimizer().has_sgd());
  EXPECT_DOUBLE_EQ(job->spec().outer_optimizer().learning_rate(), 0.7);
  EXPECT_DOUBLE_EQ(job->spec().outer_optimizer().sgd().momentum(), 0.9);
  EXPECT_TRUE(job->spec().outer_optimizer().sgd().nesterov());
  EXPECT_EQ(job->spec().verify_fraction(), 0);

  // While the job runs, each worker keeps its inner optimizer in its state directory.
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  bool seen = false;
  while (!seen && absl::Now() < deadline) {
    for (int i = 0; i < 2; ++i) {
      seen = seen || std::filesystem::exists(absl::StrCat(cluster.worker_state_dir(i), "/local-steps/",
                                                          job->job_id(), ".safetensors"));
    }
    absl::StatusOr<v1::Job> now = cluster.GetJob(job->job_id());
    ASSERT_TRUE(now.ok()) << now.status();
    if (now->state() == v1::JOB_STATE_SUCCEEDED || now->state() == v1::JOB_STATE_FAILED) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_TRUE(seen) << cluster.Logs();

  // It learned: the held-out loss after the last round is below the one before the first.
  double first = -1, last = -1;
  for (const v1::JobEvent& event : AllEvents(cluster, job->job_id())) {
    if (!event.has_evaluation()) continue;
    if (first < 0) first = event.evaluation().bits_per_byte();
    last = event.evaluation().bits_per_byte();
  }
  ASSERT_GT(first, 0);
  EXPECT_LT(last, first - 0.1) << first << " → " << last;

  // The finished job's inner state is dropped at the workers' next heartbeats.
  const absl::Time gone_by = absl::Now() + absl::Seconds(30);
  bool gone = false;
  while (!gone && absl::Now() < gone_by) {
    gone = true;
    for (int i = 0; i < 2; ++i) {
      gone = gone && !std::filesystem::exists(absl::StrCat(cluster.worker_state_dir(i), "/local-steps/",
                                                           job->job_id(), ".safetensors"));
    }
    if (!gone) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(gone) << cluster.Logs();
}

// Final held-out bits per byte of a finished job (its last evaluation event).
double FinalBitsPerByte(Cluster& cluster, const std::string& job_id) {
  double last = -1;
  for (const v1::JobEvent& event : AllEvents(cluster, job_id)) {
    if (event.has_evaluation()) last = event.evaluation().bits_per_byte();
  }
  return last;
}

TEST(LocalStepsEndToEndTest, Int8UpdatesTrainLikeExactOnesForAQuarterOfTheBytes) {
  Cluster cluster("local-int8");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (const char* budget : {"3MiB", "4MiB", "6MiB"})
    ASSERT_TRUE(cluster.StartWorker(budget).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(3, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = Corpus(24000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string(kSeparator));
  ASSERT_TRUE(dataset.ok()) << dataset.status();

  v1::JobSpec exact = Spec(*dataset, 32, 64, 128, 6, 6);
  exact.set_local_steps(2);
  exact.set_min_workers(3);
  v1::JobSpec int8 = exact;
  int8.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_INT8);
  int8.mutable_compression()->set_parameters(v1::COMPRESSION_INT8);
  const std::string exact_id = RunToSuccess(cluster, exact).job_id();
  const std::string int8_id = RunToSuccess(cluster, int8).job_id();
  ASSERT_FALSE(exact_id.empty());
  ASSERT_FALSE(int8_id.empty());
  absl::StatusOr<v1::Job> exact_job = cluster.GetJob(exact_id);
  absl::StatusOr<v1::Job> int8_job = cluster.GetJob(int8_id);
  ASSERT_TRUE(exact_job.ok() && int8_job.ok());
  EXPECT_EQ(int8_job->spec().compression().pseudo_gradients(), v1::COMPRESSION_INT8);

  // Results: one byte per parameter plus a scale per 256, against four bytes.
  const double back = static_cast<double>(int8_job->progress().bytes_from_workers()) /
                      static_cast<double>(exact_job->progress().bytes_from_workers());
  EXPECT_LT(back, 0.3) << int8_job->progress().bytes_from_workers() << " vs "
                       << exact_job->progress().bytes_from_workers();
  // Parameters: every version after the first reaches the workers holding the previous one as an
  // int8 difference (the first, and any worker without the previous version, get them whole).
  const double to = static_cast<double>(int8_job->progress().bytes_to_workers()) /
                    static_cast<double>(exact_job->progress().bytes_to_workers());
  EXPECT_LT(to, 0.6) << int8_job->progress().bytes_to_workers() << " vs "
                     << exact_job->progress().bytes_to_workers();

  // It trains about as well: the same held-out loss within 3%.
  const double exact_bpb = FinalBitsPerByte(cluster, exact_id);
  const double int8_bpb = FinalBitsPerByte(cluster, int8_id);
  ASSERT_GT(exact_bpb, 0);
  EXPECT_LT(int8_bpb, exact_bpb * 1.03) << exact_bpb << " exact vs " << int8_bpb << " int8";
  std::cout << "int8/exact bytes back " << back << ", to workers " << to << "; held-out bits per byte "
            << exact_bpb << " exact, " << int8_bpb << " int8\n";
  // No worker rebuilt parameters that differ from the coordinator's (ParameterCache logs it).
  EXPECT_EQ(cluster.Logs().find("fetching the whole parameters"), std::string::npos) << cluster.Logs();
}

// Elastic membership: a worker joins a running local-steps job and takes shards from the next
// round (its inner optimizer starts afresh); another leaves (SIGTERM: it drains and deregisters) and
// the job goes on with who is left, min_workers allowing.
TEST(LocalStepsEndToEndTest, WorkersJoinAndLeaveARunningJob) {
  Cluster cluster("local-elastic");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(1, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = Corpus(24000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string(kSeparator));
  ASSERT_TRUE(dataset.ok()) << dataset.status();

  v1::JobSpec spec = Spec(*dataset, 32, 64, 128, 4, 100);
  spec.set_local_steps(2);
  spec.set_min_workers(1);
  spec.set_checkpoint_interval_rounds(50);
  spec.set_eval_interval_rounds(50);
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  auto wait_for = [&](const std::function<bool(const v1::Job&)>& done, const char* what) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      absl::StatusOr<v1::Job> now = cluster.GetJob(job->job_id());
      if (now.ok() && done(*now)) return *now;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "timed out waiting for " << what << cluster.Logs();
    return v1::Job();
  };
  wait_for([](const v1::Job& j) { return j.progress().rounds_completed() >= 2; }, "round 2");

  // A second worker joins mid-job and is given shards.
  ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  const v1::Job joined =
      wait_for([](const v1::Job& j) { return j.progress().active_workers() == 2; }, "two workers");
  EXPECT_EQ(joined.state(), v1::JOB_STATE_RUNNING);

  // The first leaves; the job goes on with the newcomer alone.
  cluster.worker(0).Signal(SIGTERM);
  ASSERT_TRUE(cluster.worker(0).Wait(absl::Seconds(30)).ok()) << cluster.Logs();
  const int64_t left_after =
      wait_for([](const v1::Job& j) { return j.progress().active_workers() == 1; }, "one worker again")
          .progress()
          .rounds_completed();
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();

  int with_two = 0, with_one_after_leaving = 0;
  for (const v1::JobEvent& event : AllEvents(cluster, job->job_id())) {
    if (!event.has_round_completed()) continue;
    const v1::RoundCompleted& round = event.round_completed();
    with_two += round.workers() == 2 ? 1 : 0;
    with_one_after_leaving += round.round() > left_after && round.workers() == 1 ? 1 : 0;
  }
  EXPECT_GT(with_two, 0);
  EXPECT_GT(with_one_after_leaving, 0);
}

// Under a round's time budget (JobSpec.round_time_budget_seconds) a worker takes the inner steps
// that fit and the round does not wait for one that stops answering: its shard is dropped and the
// job goes on.
TEST(LocalStepsEndToEndTest, UnderATimeBudgetWorkersTakeTheStepsThatFitAndALateOneIsDropped) {
  Cluster cluster("local-budget");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cluster.StartWorker("4MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(3, absl::Seconds(30)).ok()) << cluster.Logs();
  const std::string text = Corpus(24000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(text, std::string(kSeparator));
  ASSERT_TRUE(dataset.ok()) << dataset.status();

  // A budget no step fits in: every worker takes its first step only.
  v1::JobSpec spec = Spec(*dataset, 32, 64, 128, 12, 3);
  *spec.mutable_optimizer() = PlainSgd(0.1);
  spec.set_local_steps(4);
  *spec.mutable_outer_optimizer() = PlainSgd(1.0);
  spec.set_round_time_budget_seconds(0.001);
  const std::string hurried = RunToSuccess(cluster, spec).job_id();
  ASSERT_FALSE(hurried.empty());
  std::optional<v1::RoundCompleted> hurried_first;
  for (const v1::JobEvent& event : AllEvents(cluster, hurried)) {
    if (!event.has_round_completed()) continue;
    const v1::RoundCompleted& done = event.round_completed();
    if (done.round() == 1) hurried_first = done;
    EXPECT_EQ(done.inner_steps(), done.workers()) << done.DebugString();  // one step each
    EXPECT_LT(done.tokens(), 4 * 12 * 127 / 2) << done.DebugString();     // about a quarter was trained
    EXPECT_THAT(done.late_workers(), ::testing::IsEmpty());
  }
  // The first steps of round 1 are every worker's share of batch 1: divided by the tokens that
  // arrived, the outer step is the synchronous SGD step over batch 1, as one inner step without a
  // budget gives (undivided, it would be about a quarter of it).
  v1::JobSpec one_step = spec;
  one_step.set_local_steps(1);
  one_step.clear_round_time_budget_seconds();
  one_step.set_rounds(1);
  const std::string reference = RunToSuccess(cluster, one_step).job_id();
  ASSERT_FALSE(reference.empty());
  std::optional<v1::RoundCompleted> reference_first;
  for (const v1::JobEvent& event : AllEvents(cluster, reference)) {
    if (event.has_round_completed()) reference_first = event.round_completed();
  }
  ASSERT_TRUE(hurried_first.has_value() && reference_first.has_value());
  EXPECT_EQ(hurried_first->tokens(), reference_first->tokens());
  EXPECT_NEAR(hurried_first->gradient_norm(), reference_first->gradient_norm(),
              1e-5 * reference_first->gradient_norm());
  EXPECT_NEAR(hurried_first->loss(), reference_first->loss(), 1e-6);

  // A worker that stops answering mid-job (SIGSTOP) is not waited for past the round's deadline.
  // The worker is stopped right after a round while still counted live (its heartbeats are missed
  // for a while first), so a later round sends it a shard that never comes back; no evaluation runs
  // meanwhile (evaluations wait for all their shards, reassigning as synchronous rounds do).
  spec.set_round_time_budget_seconds(1.0);
  spec.set_rounds(8);
  spec.set_eval_interval_rounds(0);
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  auto wait_for_round = [&](int64_t round) {
    const absl::Time deadline = absl::Now() + absl::Seconds(90);
    while (absl::Now() < deadline) {
      absl::StatusOr<v1::Job> now = cluster.GetJob(job->job_id());
      if (now.ok() && now->progress().rounds_completed() >= round) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  };
  ASSERT_TRUE(wait_for_round(2)) << cluster.Logs();
  cluster.worker(0).Signal(SIGSTOP);
  const bool went_on = wait_for_round(5);
  cluster.worker(0).Signal(SIGCONT);
  ASSERT_TRUE(went_on) << cluster.Logs();
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(180));
  ASSERT_TRUE(done.ok()) << done.status() << cluster.Logs();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  // The late shards are dropped, not reassigned. (A later round's shard may be: once resumed, the
  // worker still finishes its dropped shard and refuses new work as busy meanwhile, which the
  // coordinator answers by trying another worker.)
  std::set<int64_t> late_rounds;
  const std::vector<v1::JobEvent> events = AllEvents(cluster, job->job_id());
  for (const v1::JobEvent& event : events) {
    if (event.has_round_completed() && event.round_completed().late_workers_size() > 0) {
      late_rounds.insert(event.round_completed().round());
    }
  }
  EXPECT_FALSE(late_rounds.empty()) << cluster.Logs();
  for (const v1::JobEvent& event : events) {
    if (event.has_shard_reassigned()) {
      EXPECT_EQ(late_rounds.count(event.shard_reassigned().round()), 0u)
          << event.shard_reassigned().DebugString() << cluster.Logs();
    }
  }
}

}  // namespace
}  // namespace slimfit
