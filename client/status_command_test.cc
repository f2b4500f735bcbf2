#include "client/status_command.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "base/files.h"
#include "base/test_util.h"
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

v1::Job RunningJob() {
  v1::Job job;
  job.set_job_id("job-000017");
  job.mutable_spec()->set_name("tiny");
  job.mutable_spec()->set_rounds(200);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_state_reason("waiting for 2 eligible workers (1 live)");
  job.mutable_created_at()->set_seconds(1714566896);
  job.mutable_started_at()->set_seconds(1714566900);
  v1::JobProgress& progress = *job.mutable_progress();
  progress.set_rounds(200);
  progress.set_rounds_completed(14);
  progress.set_loss(2.34567);
  progress.set_bits_per_byte(3.38412);
  progress.set_eval_loss(2.5);
  progress.set_eval_bits_per_byte(3.6067);
  progress.set_eval_round(10);
  progress.set_tokens_per_second(12345);
  progress.set_eta_seconds(3725);
  progress.set_checkpoint_round(10);
  progress.set_active_workers(1);
  progress.set_tokens_trained(917504);
  progress.set_bytes_to_workers(250000000);
  progress.set_bytes_from_workers(320000000);
  job.set_training_tokens(1000000);
  job.set_held_out_tokens(50000);
  return job;
}

class StatusCommandTest : public ::testing::Test {
 protected:
  StatusCommandTest() : fake_(FakeCoordinator::Start()) {
    fake_->get_job = [](const v1::GetJobRequest& request, v1::Job* job) {
      if (request.job_id() != "job-000017") {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + request.job_id() + " not found");
      }
      *job = RunningJob();
      return grpc::Status::OK;
    };
  }

  absl::Status Status(std::vector<std::string> args) {
    args.push_back("--coordinator=" + fake_->address());
    out_.str("");
    return RunStatusCommand(args, out_);
  }

  std::unique_ptr<FakeCoordinator> fake_;
  std::ostringstream out_;
};

TEST_F(StatusCommandTest, ShowsEveryField) {
  ASSERT_TRUE(Status({"job-000017", "--token=t"}).ok());
  EXPECT_EQ(out_.str(),
            "job          job-000017 \"tiny\"\n"
            "state        RUNNING (waiting for 2 eligible workers (1 live))\n"
            "rounds       14/200\n"
            "loss         2.3457 (3.384 bits/byte)\n"
            "evaluation   2.5000 (3.607 bits/byte) after round 10\n"
            "speed        12.3k tokens/s, 1 active worker\n"
            "ETA          1h 02m\n"
            "checkpoint   round 10\n"
            "tokens       917,504 trained; 1,000,000 for training, 50,000 held out\n"
            "on the wire  570.0 MB (250.0 MB to workers, 320.0 MB back); 621.3 bytes per trained token\n"
            "created      2024-05-01 12:34:56 UTC\n"
            "started      2024-05-01 12:35:00 UTC\n"
            "finished     -\n");
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.get_job.size(), 1u);
  EXPECT_EQ(calls.get_job[0].job_id(), "job-000017");
  EXPECT_THAT(calls.authorizations, ElementsAre("Bearer t"));
}

TEST_F(StatusCommandTest, AJobWithNothingYetShowsDashes) {
  v1::Job job;
  job.set_job_id("job-2");
  job.set_state(v1::JOB_STATE_QUEUED);
  job.mutable_spec()->set_rounds(3);
  const std::string text = FormatJobStatus(job);
  EXPECT_THAT(text, HasSubstr("rounds       0/3\n"));
  EXPECT_THAT(text, HasSubstr("loss         -\n"));
  EXPECT_THAT(text, HasSubstr("ETA          -\n"));
  EXPECT_THAT(text, HasSubstr("checkpoint   -\n"));
  EXPECT_THAT(text, Not(HasSubstr("on the wire")));  // nothing sent yet
}

constexpr char kWireLine[] =
    "on the wire  570.0 MB (250.0 MB to workers, 320.0 MB back); 621.3 bytes per trained token";

TEST_F(StatusCommandTest, OnTheWireNamesTheCompression) {
  v1::Job job = RunningJob();
  job.mutable_spec()->set_local_steps(10);
  job.mutable_spec()->mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_INT8);
  job.mutable_spec()->mutable_compression()->set_parameters(v1::COMPRESSION_INT8);
  EXPECT_THAT(FormatJobStatus(job), HasSubstr(std::string(kWireLine) +
                                              "; pseudo-gradients int8; parameters as int8 differences\n"));

  job.mutable_spec()->mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_FLOAT16);
  job.mutable_spec()->mutable_compression()->set_parameters(v1::COMPRESSION_NONE);
  EXPECT_THAT(FormatJobStatus(job), HasSubstr(std::string(kWireLine) + "; pseudo-gradients float16\n"));

  job.mutable_spec()->mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_NONE);
  job.mutable_spec()->mutable_compression()->set_parameters(v1::COMPRESSION_BFLOAT16);
  EXPECT_THAT(FormatJobStatus(job),
              HasSubstr(std::string(kWireLine) + "; parameters as bfloat16 differences\n"));
}

TEST_F(StatusCommandTest, OnTheWireSaysNothingMoreForExactUpdates) {
  v1::Job job = RunningJob();
  job.mutable_spec()->set_local_steps(10);
  job.mutable_spec()->mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_NONE);
  job.mutable_spec()->mutable_compression()->set_parameters(v1::COMPRESSION_NONE);
  const std::string none = FormatJobStatus(job);
  EXPECT_THAT(none, HasSubstr(std::string(kWireLine) + "\n"));
  EXPECT_THAT(none, Not(HasSubstr("pseudo-gradients")));
  EXPECT_THAT(none, Not(HasSubstr("differences")));
  // Unset (a job from before compression existed) reads the same.
  job.mutable_spec()->clear_compression();
  EXPECT_EQ(FormatJobStatus(job), none);
}

TEST_F(StatusCommandTest, JsonPrintsTheJob) {
  ASSERT_TRUE(Status({"job-000017", "--json"}).ok());
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  EXPECT_EQ(json["job_id"], "job-000017");
  EXPECT_EQ(json["progress"]["rounds_completed"], "14");
  EXPECT_EQ(json["progress"]["loss"], 2.34567);
}

TEST_F(StatusCommandTest, UnknownJobIsNotFound) {
  const absl::Status status = Status({"job-404"});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(status), "GetJob: job job-404 not found");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(StatusCommandTest, UsageErrors) {
  std::ostringstream out;
  absl::Status status = RunStatusCommand({}, out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("missing argument JOB"));
  status = RunStatusCommand({"a", "b"}, out);
  EXPECT_THAT(Message(status), HasSubstr("unexpected argument 'b'"));
  ASSERT_TRUE(RunStatusCommand({"-h"}, out).ok());
  EXPECT_THAT(out.str(), StartsWith("usage: slimfit status JOB"));
}

v1::JobEvent RoundEvent(int64_t sequence, int64_t round, double loss) {
  v1::JobEvent event;
  event.set_sequence(sequence);
  event.mutable_round_completed()->set_round(round);
  event.mutable_round_completed()->set_loss(loss);
  return event;
}

v1::JobEvent EvaluationEvent(int64_t sequence, int64_t round, double loss) {
  v1::JobEvent event;
  event.set_sequence(sequence);
  event.mutable_evaluation()->set_round(round);
  event.mutable_evaluation()->set_loss(loss);
  return event;
}

// The points of the chart's polylines, each as a count.
std::vector<size_t> PolylinePointCounts(const std::string& svg) {
  std::vector<size_t> counts;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
    const size_t start = svg.find("points=\"", at) + 8;
    const std::string points = svg.substr(start, svg.find('"', start) - start);
    counts.push_back(std::count(points.begin(), points.end(), ','));
  }
  return counts;
}

TEST_F(StatusCommandTest, SvgDrawsTheHistoryUpToTheRequestNotWhatFollows) {
  fake_->watch_job = [](const v1::WatchJobRequest& request, int,
                        const FakeCoordinator::Writer<v1::JobEvent>& write) {
    if (!request.from_start()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "expected from_start");
    v1::JobEvent snapshot;
    snapshot.set_sequence(6);
    *snapshot.mutable_snapshot() = RunningJob();
    // Round 2 is computed twice (a rollback): its second value counts.
    for (const v1::JobEvent& event :
         {snapshot, EvaluationEvent(1, 0, 5.5), RoundEvent(2, 1, 5.0), RoundEvent(3, 2, 9.0),
          RoundEvent(4, 2, 4.0), RoundEvent(5, 3, 3.5), EvaluationEvent(6, 3, 3.8)}) {
      if (!write(event)) return grpc::Status::CANCELLED;
    }
    // The job goes on: live events until the client hangs up.
    for (int64_t sequence = 7; sequence < 100000; ++sequence) {
      if (!write(RoundEvent(sequence, sequence - 3, 1.0))) return grpc::Status::CANCELLED;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return grpc::Status::OK;
  };
  const std::string path = testing_util::TempPath("loss.svg");
  const absl::Status status = Status({"job-000017", "--token=t", "--svg=" + path});
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(out_.str(), HasSubstr("rounds       14/200"));  // the usual text as well
  absl::StatusOr<std::string> svg = base::ReadFileToString(path);
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_THAT(*svg, HasSubstr("job-000017 &quot;tiny&quot;: loss by round"));
  EXPECT_THAT(*svg, HasSubstr(">training loss<"));
  EXPECT_THAT(*svg, HasSubstr(">held-out loss<"));
  // Rounds 1–3 (not the live round 4 and later), evaluations before round 1 and after round 3.
  EXPECT_THAT(PolylinePointCounts(*svg), ElementsAre(3u, 2u));
  // Round 2 counts with its recomputed loss (4.0): the y axis spans 3.5–5.5, not up to 9.
  EXPECT_THAT(*svg, HasSubstr(">5.5<"));
  EXPECT_THAT(*svg, ::testing::Not(HasSubstr(">8<")));
}

TEST_F(StatusCommandTest, SvgOfAJobWithNoRoundYetSaysSo) {
  fake_->watch_job = [](const v1::WatchJobRequest&, int, const FakeCoordinator::Writer<v1::JobEvent>& write) {
    v1::JobEvent snapshot;
    snapshot.set_sequence(0);
    *snapshot.mutable_snapshot() = RunningJob();
    write(snapshot);
    return grpc::Status::OK;
  };
  const absl::Status status =
      Status({"job-000017", "--token=t", "--svg=" + testing_util::TempPath("none.svg")});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--svg: no round has completed"));
}

}  // namespace
}  // namespace slimfit::client
