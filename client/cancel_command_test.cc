#include "client/cancel_command.h"

#include <sstream>
#include <string>
#include <vector>

#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::client {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

class CancelCommandTest : public ::testing::Test {
 protected:
  CancelCommandTest() : fake_(FakeCoordinator::Start()) {
    fake_->cancel_job = [](const v1::CancelJobRequest& request, v1::Job* job) {
      if (request.job_id() == "job-stuck") {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            "job job-stuck: cancellation requested and in progress (...)");
      }
      if (request.job_id() == "job-done") {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "job job-done already SUCCEEDED");
      }
      job->set_job_id(request.job_id());
      job->set_state(v1::JOB_STATE_CANCELLED);
      job->set_state_reason("cancelled by client: " + request.reason());
      job->mutable_progress()->set_rounds(10);
      job->mutable_progress()->set_rounds_completed(4);
      return grpc::Status::OK;
    };
  }

  absl::Status Cancel(std::vector<std::string> args) {
    args.push_back("--coordinator=" + fake_->address());
    out_.str("");
    return RunCancelCommand(args, out_);
  }

  std::unique_ptr<FakeCoordinator> fake_;
  std::ostringstream out_;
};

TEST_F(CancelCommandTest, SendsTheReasonAndPrintsTheJob) {
  ASSERT_TRUE(Cancel({"job-1", "--reason", "wrong data"}).ok());
  EXPECT_EQ(out_.str(), "cancelled job-1: CANCELLED, round 4/10 (cancelled by client: wrong data)\n");
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.cancel_job.size(), 1u);
  EXPECT_EQ(calls.cancel_job[0].job_id(), "job-1");
  EXPECT_EQ(calls.cancel_job[0].reason(), "wrong data");
}

TEST_F(CancelCommandTest, FinishedJobIsAFailedPrecondition) {
  const absl::Status status = Cancel({"job-done"});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(status), "CancelJob: job job-done already SUCCEEDED");
}

// The coordinator's DEADLINE_EXCEEDED (the job has not stopped yet) is an error that says the
// cancellation goes on and how to wait for it, never "cancelled".
TEST_F(CancelCommandTest, AJobNotStoppedInTimeIsDeadlineExceededAndSaysWhatToDo) {
  const absl::Status status = Cancel({"job-stuck"});
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Message(status), HasSubstr("CancelJob: job job-stuck: cancellation requested and in progress"));
  EXPECT_THAT(Message(status), HasSubstr("`slimfit cancel job-stuck` again"));
  EXPECT_THAT(Message(status), HasSubstr("`slimfit watch job-stuck`"));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CancelCommandTest, JsonAndUsage) {
  ASSERT_TRUE(Cancel({"job-1", "--json"}).ok());
  EXPECT_THAT(out_.str(), HasSubstr("\"state\": \"JOB_STATE_CANCELLED\""));
  const absl::Status status = Cancel({"job-1", "--reason=" + std::string(1025, 'x')});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("at most 1024"));
}

}  // namespace
}  // namespace slimfit::client
