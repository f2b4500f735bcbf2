#include "client/jobs_command.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace slimfit::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

v1::Job MakeJob(int number, v1::JobState state) {
  v1::Job job;
  job.set_job_id(absl::StrCat("job-", number));
  job.mutable_spec()->set_name(absl::StrCat("run", number));
  job.set_state(state);
  job.mutable_progress()->set_rounds(100);
  job.mutable_progress()->set_rounds_completed(number);
  if (number % 2 == 0) {
    job.mutable_progress()->set_loss(2.0 + number / 100.0);
    job.mutable_progress()->set_bits_per_byte(3.0 + number / 100.0);
  }
  job.mutable_created_at()->set_seconds(1714566896 + number);
  return job;
}

class JobsCommandTest : public ::testing::Test {
 protected:
  JobsCommandTest() : fake_(FakeCoordinator::Start()) {
    // Five jobs, newest first, served two per page whatever the page size asked.
    fake_->list_jobs = [](const v1::ListJobsRequest& request, v1::ListJobsResponse* response) {
      int start = 0;
      if (!request.page_token().empty()) start = std::stoi(request.page_token().substr(5));
      for (int i = start; i < std::min(start + 2, 5); ++i) {
        *response->add_jobs() = MakeJob(5 - i, i == 0 ? v1::JOB_STATE_RUNNING : v1::JOB_STATE_SUCCEEDED);
      }
      if (start + 2 < 5) response->set_next_page_token(absl::StrCat("page-", start + 2));
      return grpc::Status::OK;
    };
  }

  absl::Status Jobs(std::vector<std::string> args) {
    args.push_back("--coordinator=" + fake_->address());
    out_.str("");
    return RunJobsCommand(args, out_);
  }

  std::unique_ptr<FakeCoordinator> fake_;
  std::ostringstream out_;
};

TEST_F(JobsCommandTest, TableFollowsEveryPage) {
  ASSERT_TRUE(Jobs({}).ok());
  EXPECT_EQ(out_.str(),
            "ID     NAME  STATE      ROUNDS    LOSS  BITS/BYTE  CREATED\n"
            "job-5  run5  RUNNING     5/100       -          -  2024-05-01 12:35:01 UTC\n"
            "job-4  run4  SUCCEEDED   4/100  2.0400      3.040  2024-05-01 12:35:00 UTC\n"
            "job-3  run3  SUCCEEDED   3/100       -          -  2024-05-01 12:34:59 UTC\n"
            "job-2  run2  SUCCEEDED   2/100  2.0200      3.020  2024-05-01 12:34:58 UTC\n"
            "job-1  run1  SUCCEEDED   1/100       -          -  2024-05-01 12:34:57 UTC\n");
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.list_jobs.size(), 3u);
  EXPECT_EQ(calls.list_jobs[0].page_token(), "");
  EXPECT_EQ(calls.list_jobs[1].page_token(), "page-2");
  EXPECT_EQ(calls.list_jobs[2].page_token(), "page-4");
}

TEST_F(JobsCommandTest, StatesAndLimit) {
  ASSERT_TRUE(Jobs({"--state=running,Succeeded", "--limit=3"}).ok());
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.list_jobs.size(), 2u);
  EXPECT_THAT(calls.list_jobs[0].states(), ElementsAre(v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED));
  EXPECT_EQ(calls.list_jobs[0].page_size(), 3);
  EXPECT_EQ(calls.list_jobs[1].page_size(), 1);
  EXPECT_THAT(out_.str(), HasSubstr("job-3"));
  EXPECT_THAT(out_.str(), ::testing::Not(HasSubstr("job-2")));
  EXPECT_THAT(out_.str(), HasSubstr("(more jobs: raise --limit"));
}

TEST_F(JobsCommandTest, JsonHoldsEveryJob) {
  ASSERT_TRUE(Jobs({"--json", "--limit=0"}).ok());
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  ASSERT_EQ(json["jobs"].size(), 5u);
  EXPECT_EQ(json["jobs"][0]["job_id"], "job-5");
  EXPECT_EQ(json["next_page_token"], "");
}

TEST_F(JobsCommandTest, EmptyListingAndBadFlags) {
  fake_->list_jobs = [](const v1::ListJobsRequest&, v1::ListJobsResponse*) { return grpc::Status::OK; };
  ASSERT_TRUE(Jobs({}).ok());
  EXPECT_EQ(out_.str(), "no jobs\n");
  absl::Status status = Jobs({"--state=sleeping"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("--state=sleeping: unknown job state"));
  status = Jobs({"--limit=-1"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobsCommandTest, AStuckPageTokenIsAnError) {
  fake_->list_jobs = [](const v1::ListJobsRequest&, v1::ListJobsResponse* response) {
    response->set_next_page_token("same");
    return grpc::Status::OK;
  };
  const absl::Status status = Jobs({"--limit=0"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(Message(status), HasSubstr("page token 'same' twice"));
}

TEST_F(JobsCommandTest, ACyclingPageTokenIsAnError) {
  fake_->list_jobs = [](const v1::ListJobsRequest& request, v1::ListJobsResponse* response) {
    response->set_next_page_token(request.page_token() == "a" ? "b" : "a");  // a, b, a, …
    return grpc::Status::OK;
  };
  const absl::Status status = Jobs({"--limit=0"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(Message(status), HasSubstr("page token 'a' twice"));
}

}  // namespace
}  // namespace slimfit::client
