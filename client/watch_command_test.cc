#include "client/watch_command.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/command.h"
#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace slimfit::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

v1::JobEvent Snapshot(int64_t sequence, v1::JobState state, int64_t rounds_completed) {
  v1::JobEvent event;
  event.set_sequence(sequence);
  event.set_job_id("job-1");
  v1::Job& job = *event.mutable_snapshot();
  job.set_job_id("job-1");
  job.mutable_spec()->set_name("tiny");
  job.set_state(state);
  job.mutable_progress()->set_rounds(10);
  job.mutable_progress()->set_rounds_completed(rounds_completed);
  return event;
}

v1::JobEvent Round(int64_t sequence, int64_t round) {
  v1::JobEvent event;
  event.set_sequence(sequence);
  v1::RoundCompleted& completed = *event.mutable_round_completed();
  completed.set_round(round);
  completed.set_rounds(10);
  completed.set_loss(2.5 - 0.1 * static_cast<double>(round));
  completed.set_bits_per_byte(completed.loss() / 0.6931471805599453);
  completed.set_tokens_per_second(12345);
  completed.set_eta_seconds(60.0 * static_cast<double>(10 - round));
  return event;
}

v1::JobEvent StateChange(int64_t sequence, v1::JobState from, v1::JobState to, const std::string& reason) {
  v1::JobEvent event;
  event.set_sequence(sequence);
  event.mutable_state_changed()->set_previous(from);
  event.mutable_state_changed()->set_state(to);
  event.mutable_state_changed()->set_reason(reason);
  return event;
}

// Writes `events` and ends the stream with `status`.
grpc::Status Stream(const FakeCoordinator::Writer<v1::JobEvent>& write,
                    const std::vector<v1::JobEvent>& events, grpc::Status status = grpc::Status::OK) {
  for (const v1::JobEvent& event : events) {
    if (!write(event)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  return status;
}

class WatchCommandTest : public ::testing::Test {
 protected:
  WatchCommandTest() : fake_(FakeCoordinator::Start()) {}

  absl::Status Watch(std::vector<std::string> more = {}, bool terminal = false) {
    std::vector<std::string> args = {"job-1", "--coordinator=" + fake_->address(), "--token=tok"};
    args.insert(args.end(), more.begin(), more.end());
    out_.str("");
    return RunWatchCommand(args, out_, terminal);
  }

  std::vector<std::string> Lines() const { return absl::StrSplit(out_.str(), '\n', absl::SkipEmpty()); }

  std::unique_ptr<FakeCoordinator> fake_;
  std::ostringstream out_;
};

TEST_F(WatchCommandTest, RendersEveryKindOfEventAndSucceeds) {
  fake_->watch_job = [](const v1::WatchJobRequest& request, int,
                        const FakeCoordinator::Writer<v1::JobEvent>& write) {
    EXPECT_EQ(request.job_id(), "job-1");
    EXPECT_EQ(request.after_sequence(), 0);
    v1::JobEvent evaluation;
    evaluation.set_sequence(5);
    evaluation.mutable_evaluation()->set_round(1);
    evaluation.mutable_evaluation()->set_loss(2.25);
    evaluation.mutable_evaluation()->set_bits_per_byte(3.246);
    evaluation.mutable_evaluation()->set_tokens(65536);
    v1::JobEvent checkpoint;
    checkpoint.set_sequence(6);
    checkpoint.mutable_checkpoint_written()->set_round(1);
    checkpoint.mutable_checkpoint_written()->set_bytes(3 << 20);
    checkpoint.mutable_checkpoint_written()->set_sha256(std::string(64, 'a'));
    v1::JobEvent plan;
    plan.set_sequence(7);
    v1::WorkerPlanChanged& change = *plan.mutable_worker_plan_changed();
    change.set_worker_id("w-3f2a");
    change.set_round(2);
    change.mutable_plan()->mutable_plan()->set_slice(256);
    change.mutable_plan()->mutable_plan()->set_prefix_mode(v1::PREFIX_MODE_CHUNKED);
    change.mutable_plan()->mutable_plan()->set_block(64);
    change.mutable_plan()->mutable_plan()->set_front_policy(v1::FRONT_POLICY_REVERSE);
    change.mutable_plan()->mutable_plan()->set_dtype(v1::DTYPE_FLOAT32);
    change.mutable_plan()->mutable_prediction()->set_peak_bytes(20 << 20);
    change.set_predicted_tokens_per_second(5000);
    change.set_reason("worker joined");
    v1::JobEvent shard;
    shard.set_sequence(8);
    shard.mutable_shard_reassigned()->set_round(2);
    shard.mutable_shard_reassigned()->set_shard_id(4);
    shard.mutable_shard_reassigned()->set_from_worker_id("w-77");
    shard.mutable_shard_reassigned()->set_next_attempt(2);
    shard.mutable_shard_reassigned()->set_reason("worker lost");
    v1::JobEvent agreed;
    agreed.set_sequence(9);
    v1::ShardVerified& check = *agreed.mutable_shard_verified();
    check.set_round(2);
    check.set_shard_id(1);
    check.add_worker_ids("w-3f2a");
    check.add_worker_ids("w-77");
    check.set_relative_difference(3e-7);
    check.set_agreed(true);
    v1::JobEvent outvoted = agreed;
    outvoted.set_sequence(10);
    outvoted.mutable_shard_verified()->add_worker_ids("w-9c");
    outvoted.mutable_shard_verified()->set_agreed(false);
    outvoted.mutable_shard_verified()->set_odd_worker_id("w-77");
    v1::JobEvent quarantine;
    quarantine.set_sequence(11);
    quarantine.mutable_worker_quarantined()->set_round(2);
    quarantine.mutable_worker_quarantined()->set_worker_id("w-77");
    quarantine.mutable_worker_quarantined()->set_reason("outvoted on round 2 shard 1");
    quarantine.mutable_worker_quarantined()->set_recomputed_shards(3);
    v1::JobEvent late;
    late.set_sequence(12);
    late.mutable_worker_quarantined()->set_round(5);
    late.mutable_worker_quarantined()->set_worker_id("w-9c");
    late.mutable_worker_quarantined()->set_reason("outvoted on round 5 shard 0");
    late.mutable_worker_quarantined()->set_recompute_from_round(3);
    late.mutable_worker_quarantined()->set_rolled_back_to_round(2);
    v1::JobEvent budgeted = Round(13, 6);
    budgeted.mutable_round_completed()->set_inner_steps(7);
    budgeted.mutable_round_completed()->set_recomputations(1);
    budgeted.mutable_round_completed()->add_late_workers("w-9c");
    return Stream(write, {Snapshot(3, v1::JOB_STATE_RUNNING, 0), Round(4, 1), evaluation, checkpoint, plan,
                          shard, agreed, outvoted, quarantine, late, budgeted,
                          StateChange(14, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED, "")});
  };
  const absl::Status status = Watch();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(
      Lines(),
      ElementsAre(
          "watching job-1 \"tiny\": RUNNING, round 0/10",
          "round 1/10  loss 2.4000  3.462 bits/byte  12.3k tokens/s  ETA 9m 00s",
          "evaluation after round 1: loss 2.2500, 3.246 bits/byte (65,536 held-out tokens)",
          "checkpoint of round 1 written (3.0 MiB, sha256 aaaaaaaaaaaa...)",
          "worker w-3f2a plan from round 2: C = 256, chunked/64, reverse, peak 20.0 MiB, "
          "5.00k tokens/s predicted "
          "(worker joined)",
          "round 2 shard 4 reassigned from worker w-77 (next attempt 2): worker lost",
          "round 2 shard 1: w-3f2a, w-77, w-9c disagreed; w-77 outvoted (the other two agree to 3e-07)",
          "worker w-77 quarantined in round 2: outvoted on round 2 shard 1 (the round is computed "
          "again without its 3 shards)",
          "worker w-9c quarantined in round 5: outvoted on round 5 shard 0; its results since "
          "round 3 are undone: training goes back to round 2's checkpoint",
          "round 6/10  loss 1.9000  2.741 bits/byte  12.3k tokens/s  ETA 4m 00s  computed 2 times  7 inner "
          "steps  "
          "late, dropped: w-9c",
          "state RUNNING -> SUCCEEDED"));
  EXPECT_THAT(fake_->calls().authorizations, ElementsAre("Bearer tok"));
}

// A coordinator restart sends the job back to its newest checkpoint that verifies: the event
// says from where and why, the rounds computed again say so, and progress does not go back.
TEST_F(WatchCommandTest, RendersAResumeAndTheRoundsRunAgain) {
  fake_->watch_job = [](const v1::WatchJobRequest&, int, const FakeCoordinator::Writer<v1::JobEvent>& write) {
    v1::JobEvent restart;
    restart.set_sequence(4);
    v1::JobResumed& resumed = *restart.mutable_resumed();
    resumed.set_round(2);
    resumed.set_reason(v1::JobResumed::REASON_COORDINATOR_RESTART);
    resumed.set_rounds_completed(4);
    resumed.add_unverifiable_checkpoints(
        "round 4: /s/round-000004.safetensors: the SHA-256 of its 9 bytes is 5e");
    v1::JobEvent again = Round(5, 3);
    again.mutable_round_completed()->set_rerun(true);
    v1::JobEvent rollback;
    rollback.set_sequence(6);
    rollback.mutable_resumed()->set_reason(v1::JobResumed::REASON_ROLLBACK);
    rollback.mutable_resumed()->set_rounds_completed(4);
    rollback.mutable_resumed()->set_initial_parameters(true);
    v1::JobEvent one;
    one.set_sequence(7);
    one.mutable_resumed()->set_reason(v1::JobResumed::REASON_COORDINATOR_RESTART);
    one.mutable_resumed()->set_round(3);
    one.mutable_resumed()->set_rounds_completed(4);
    return Stream(write, {Snapshot(3, v1::JOB_STATE_RUNNING, 4), restart, again, rollback, one,
                          StateChange(8, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED, "")});
  };
  const absl::Status status = Watch();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(Lines(),
              ElementsAre("watching job-1 \"tiny\": RUNNING, round 4/10",
                          "resumed after a coordinator restart from round 2's checkpoint; rounds 3 to 4 "
                          "run again; passed over (changed on disk): round 4: "
                          "/s/round-000004.safetensors: the SHA-256 of its 9 bytes is 5e",
                          "round 3/10 (run again)  loss 2.2000  3.174 bits/byte  12.3k tokens/s  ETA 7m 00s",
                          "resumed after a rollback from the initial model: no checkpoint matches what "
                          "was written; rounds 1 to 4 run again",
                          "resumed after a coordinator restart from round 3's checkpoint; round 4 runs again",
                          "state RUNNING -> SUCCEEDED"));
}

TEST_F(WatchCommandTest, FailedJobExitsOneWithItsReason) {
  fake_->watch_job = [](const v1::WatchJobRequest&, int, const FakeCoordinator::Writer<v1::JobEvent>& write) {
    return Stream(write, {Snapshot(1, v1::JOB_STATE_RUNNING, 2),
                          StateChange(2, v1::JOB_STATE_RUNNING, v1::JOB_STATE_FAILED,
                                      "round 3: every eligible worker refused the plan")});
  };
  const absl::Status status = Watch();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Message(status), "job-1 FAILED: round 3: every eligible worker refused the plan");
  EXPECT_EQ(base::ExitCodeForStatus(status), base::kExitFailure);
  EXPECT_THAT(out_.str(), HasSubstr("state RUNNING -> FAILED: round 3"));
}

TEST_F(WatchCommandTest, CancelledJobExitsOne) {
  fake_->watch_job = [](const v1::WatchJobRequest&, int, const FakeCoordinator::Writer<v1::JobEvent>& write) {
    v1::JobEvent snapshot = Snapshot(7, v1::JOB_STATE_CANCELLED, 4);
    snapshot.mutable_snapshot()->set_state_reason("cancelled by client: wrong data");
    return Stream(write, {snapshot});  // already over: the snapshot, then the end
  };
  const absl::Status status = Watch();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Message(status), "job-1 CANCELLED: cancelled by client: wrong data");
  EXPECT_EQ(base::ExitCodeForStatus(status), base::kExitFailure);
}

TEST_F(WatchCommandTest, ReconnectsAfterUnavailableWithoutRepeatingEvents) {
  fake_->watch_job = [](const v1::WatchJobRequest& request, int call,
                        const FakeCoordinator::Writer<v1::JobEvent>& write) {
    if (call == 0) {
      return Stream(write, {Snapshot(3, v1::JOB_STATE_RUNNING, 0), Round(4, 1)},
                    grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down"));
    }
    EXPECT_EQ(request.after_sequence(), 4);
    // A fresh snapshot, then the retained events: one the client has seen, and newer ones.
    return Stream(write, {Snapshot(5, v1::JOB_STATE_RUNNING, 2), Round(4, 1), Round(5, 2),
                          StateChange(6, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED, "all rounds done")});
  };
  const absl::Status status = Watch();
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 6u) << out_.str();
  EXPECT_EQ(lines[0], "watching job-1 \"tiny\": RUNNING, round 0/10");
  EXPECT_THAT(lines[1], StartsWith("round 1/10 "));
  EXPECT_THAT(lines[2], StartsWith("lost the coordinator at " + fake_->address() +
                                   " (coordinator shutting down); "
                                   "reconnecting for up to 1m 00s"));
  EXPECT_EQ(lines[3], "reconnected: job-1 \"tiny\": RUNNING, round 2/10");
  EXPECT_THAT(lines[4], StartsWith("round 2/10 "));
  EXPECT_EQ(lines[5], "state RUNNING -> SUCCEEDED: all rounds done");
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.watch_job.size(), 2u);
  EXPECT_EQ(calls.watch_job[1].after_sequence(), 4);
}

TEST_F(WatchCommandTest, GivesUpAfterTheReconnectWindow) {
  fake_->watch_job = [](const v1::WatchJobRequest&, int call,
                        const FakeCoordinator::Writer<v1::JobEvent>& write) {
    const grpc::Status gone(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down");
    if (call == 0) return Stream(write, {Snapshot(3, v1::JOB_STATE_RUNNING, 0)}, gone);
    return gone;
  };
  const absl::Time start = absl::Now();
  const absl::Status status = Watch({"--reconnect_seconds=0.5"});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Message(status), StartsWith("lost the coordinator at " + fake_->address() +
                                          " while watching job-1 and could not reconnect"));
  EXPECT_THAT(Message(status), HasSubstr("last event 3"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(450));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_GE(fake_->calls().watch_job.size(), 3u);  // tried again, with back-off
}

TEST_F(WatchCommandTest, UnknownJobIsNotFoundAndNotRetried) {
  fake_->watch_job = [](const v1::WatchJobRequest& request, int,
                        const FakeCoordinator::Writer<v1::JobEvent>&) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + request.job_id() + " not found");
  };
  const absl::Status status = Watch();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(status), "WatchJob: job job-1 not found");
  EXPECT_EQ(base::ExitCodeForStatus(status), base::kExitUsage);
  EXPECT_EQ(fake_->calls().watch_job.size(), 1u);
}

TEST_F(WatchCommandTest, FromStartReplaysTheEventsBeforeTheSnapshot) {
  fake_->watch_job = [](const v1::WatchJobRequest& request, int,
                        const FakeCoordinator::Writer<v1::JobEvent>& write) {
    EXPECT_TRUE(request.from_start());
    // The coordinator's order: the snapshot (at the latest sequence), then every retained event.
    return Stream(write, {Snapshot(3, v1::JOB_STATE_SUCCEEDED, 1), Round(2, 1),
                          StateChange(3, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED, "")});
  };
  ASSERT_TRUE(Watch({"--json", "--from_start"}).ok());
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_EQ(nlohmann::json::parse(lines[1])["round_completed"]["round"], "1");
  EXPECT_EQ(nlohmann::json::parse(lines[2])["state_changed"]["state"], "JOB_STATE_SUCCEEDED");

  // Without it, what came before the snapshot is not replayed.
  fake_->watch_job = [](const v1::WatchJobRequest& request, int,
                        const FakeCoordinator::Writer<v1::JobEvent>& write) {
    EXPECT_FALSE(request.from_start());
    return Stream(write, {Snapshot(3, v1::JOB_STATE_SUCCEEDED, 1)});
  };
  ASSERT_TRUE(Watch({"--json"}).ok());
  EXPECT_EQ(Lines().size(), 1u) << out_.str();
}

TEST_F(WatchCommandTest, JsonLinesOneObjectPerEvent) {
  fake_->watch_job = [](const v1::WatchJobRequest&, int, const FakeCoordinator::Writer<v1::JobEvent>& write) {
    return Stream(write, {Snapshot(1, v1::JOB_STATE_RUNNING, 0), Round(2, 1),
                          StateChange(3, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED, "")});
  };
  ASSERT_TRUE(Watch({"--json"}).ok());
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["snapshot"]["job_id"], "job-1");
  EXPECT_EQ(nlohmann::json::parse(lines[1])["round_completed"]["round"], "1");
  EXPECT_EQ(nlohmann::json::parse(lines[2])["state_changed"]["state"], "JOB_STATE_SUCCEEDED");
}

TEST_F(WatchCommandTest, TerminalRedrawsTheProgressLineInPlace) {
  fake_->watch_job = [](const v1::WatchJobRequest&, int, const FakeCoordinator::Writer<v1::JobEvent>& write) {
    return Stream(write, {Snapshot(1, v1::JOB_STATE_RUNNING, 0), Round(2, 1), Round(3, 2),
                          StateChange(4, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED, "")});
  };
  ASSERT_TRUE(Watch({}, /*terminal=*/true).ok());
  const std::string text = out_.str();
  const std::string round1 = "\r\x1b[Kround 1/10 ";
  const std::string round2 = "\r\x1b[Kround 2/10 ";
  ASSERT_NE(text.find(round1), std::string::npos) << text;
  ASSERT_NE(text.find(round2), std::string::npos) << text;
  // Round 2 overwrites round 1 (no line break between them); the state change is written above the
  // progress line, which is drawn again and ended with a line break.
  const std::string between = text.substr(text.find(round1), text.find(round2) - text.find(round1));
  EXPECT_THAT(between, Not(HasSubstr("\n")));
  EXPECT_THAT(text, HasSubstr("\r\x1b[Kstate RUNNING -> SUCCEEDED\nround 2/10 "));
  EXPECT_EQ(text.back(), '\n');
}

TEST_F(WatchCommandTest, UsageErrors) {
  std::ostringstream out;
  absl::Status status = RunWatchCommand({}, out, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("missing argument JOB for 'slimfit watch'"));
  status = RunWatchCommand({"job-1", "--reconnect_seconds=-1"}, out, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(RunWatchCommand({"--help"}, out, false).ok());
  EXPECT_THAT(out.str(), StartsWith("usage: slimfit watch JOB"));
}

}  // namespace
}  // namespace slimfit::client
