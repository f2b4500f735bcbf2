#include "client/service_format.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace slimfit::client {
namespace {

using ::testing::HasSubstr;

google::protobuf::Timestamp At(int64_t seconds) {
  google::protobuf::Timestamp time;
  time.set_seconds(seconds);
  return time;
}

TEST(ServiceFormatTest, StateNames) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_CANCELLED), "CANCELLED");
  EXPECT_EQ(JobStateName(static_cast<v1::JobState>(42)), "42");
  EXPECT_EQ(WorkerStateName(v1::WORKER_STATE_LOST), "LOST");
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_FAILED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_RUNNING));
}

TEST(ServiceFormatTest, ParsesJobStatesInAnyCase) {
  absl::StatusOr<std::vector<v1::JobState>> states =
      ParseJobStates("state", {"running", "QUEUED", "job_state_failed"});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(*states,
            (std::vector<v1::JobState>{v1::JOB_STATE_RUNNING, v1::JOB_STATE_QUEUED, v1::JOB_STATE_FAILED}));

  for (const char* bad : {"sleeping", "unspecified", ""}) {
    absl::StatusOr<std::vector<v1::JobState>> refused = ParseJobStates("state", {bad});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("expected queued, running")) << bad;
  }
}

TEST(ServiceFormatTest, TimesAndAges) {
  EXPECT_EQ(FormatTimestamp(At(0)), "-");
  EXPECT_EQ(FormatTimestamp(At(1714566896)), "2024-05-01 12:34:56 UTC");
  const absl::Time now = absl::FromUnixSeconds(1714566896);
  EXPECT_EQ(FormatAge(At(1714566896 - 5), now), "5s ago");
  EXPECT_EQ(FormatAge(At(1714566896 - 192), now), "3m 12s ago");
  EXPECT_EQ(FormatAge(At(1714566896 + 3), now), "now");
  EXPECT_EQ(FormatAge(At(0), now), "-");
}

TEST(ServiceFormatTest, LossesShowDashWhenAbsent) {
  EXPECT_EQ(FormatLoss(2.34567), "2.3457");
  EXPECT_EQ(FormatLoss(std::nullopt), "-");
  EXPECT_EQ(FormatBitsPerByte(3.38412), "3.384 bits/byte");
  EXPECT_EQ(FormatBitsPerByte(std::nullopt), "-");
}

TEST(ServiceFormatTest, JobSummaryShowsWhatIsKnown) {
  v1::Job job;
  job.set_job_id("job-000017");
  job.mutable_spec()->set_name("tiny");
  job.mutable_spec()->set_rounds(200);
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_state_reason("waiting for 1 eligible worker");
  EXPECT_EQ(JobSummary(job), "job-000017 \"tiny\": QUEUED, round 0/200 (waiting for 1 eligible worker)");

  job.set_state(v1::JOB_STATE_RUNNING);
  job.clear_state_reason();
  v1::JobProgress& progress = *job.mutable_progress();
  progress.set_rounds(200);
  progress.set_rounds_completed(14);
  progress.set_loss(2.34567);
  progress.set_bits_per_byte(3.38412);
  progress.set_tokens_per_second(12345);
  progress.set_eta_seconds(3725);
  EXPECT_EQ(JobSummary(job),
            "job-000017 \"tiny\": RUNNING, round 14/200, loss 2.3457 (3.384 bits/byte), 12.3k tokens/s, "
            "ETA 1h 02m");
}

TEST(ServiceFormatTest, PlanSummaries) {
  v1::Plan plan;
  plan.set_dtype(v1::DTYPE_FLOAT32);
  EXPECT_EQ(PlanSummaryOf(plan), "full back-propagation");
  plan.set_slice(256);
  plan.set_prefix_mode(v1::PREFIX_MODE_CHUNKED);
  plan.set_block(64);
  plan.set_front_policy(v1::FRONT_POLICY_REVERSE);
  EXPECT_EQ(PlanSummaryOf(plan), "C = 256, chunked/64, reverse");
  plan.clear_front_policy();
  EXPECT_THAT(PlanSummaryOf(plan), ::testing::StartsWith("C = 256 (unreadable plan: "));
}

TEST(ServiceFormatTest, ProtoJsonUsesFieldNames) {
  v1::Job job;
  job.set_job_id("job-1");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_progress()->set_rounds(7);
  const std::string line = ProtoToJson(job, /*pretty=*/false);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json json = nlohmann::json::parse(line);
  EXPECT_EQ(json["job_id"], "job-1");
  EXPECT_EQ(json["state"], "JOB_STATE_RUNNING");
  EXPECT_EQ(json["progress"]["rounds"], "7");
  EXPECT_EQ(json["progress"]["rounds_completed"], "0");  // zero values are printed
  EXPECT_FALSE(json["progress"].contains("loss"));       // absent optionals are not
  EXPECT_NE(ProtoToJson(job, /*pretty=*/true).find('\n'), std::string::npos);
}

}  // namespace
}  // namespace slimfit::client
