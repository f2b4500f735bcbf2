#include "client/workers_command.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace slimfit::client {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

v1::PlanCandidate SlicedPlan(int64_t slice) {
  v1::PlanCandidate candidate;
  v1::Plan& plan = *candidate.mutable_plan();
  plan.set_slice(slice);
  plan.set_prefix_mode(v1::PREFIX_MODE_CHUNKED);
  plan.set_block(64);
  plan.set_front_policy(v1::FRONT_POLICY_REVERSE);
  plan.set_dtype(v1::DTYPE_FLOAT32);
  return candidate;
}

v1::WorkerInfo Worker(const std::string& id, v1::WorkerState state, int64_t heartbeat_age_seconds) {
  v1::WorkerInfo worker;
  worker.set_worker_id(id);
  worker.set_state(state);
  worker.set_device("cpu");
  worker.set_memory_budget_bytes(int64_t{32} << 20);
  worker.mutable_last_heartbeat_at()->set_seconds(absl::ToUnixSeconds(absl::Now()) - heartbeat_age_seconds);
  return worker;
}

class WorkersCommandTest : public ::testing::Test {
 protected:
  WorkersCommandTest() : fake_(FakeCoordinator::Start()) {
    fake_->list_workers = [](const v1::ListWorkersRequest& request, v1::ListWorkersResponse* response) {
      if (request.page_token().empty()) {
        v1::WorkerInfo busy = Worker("w-3f2a", v1::WORKER_STATE_BUSY, 2);
        busy.set_device("cuda:0");
        v1::WorkerJobPlan& first = *busy.add_plans();
        first.set_job_id("job-1");
        *first.mutable_plan() = SlicedPlan(256);
        first.set_predicted_tokens_per_second(12345);
        first.set_measured_tokens_per_second(11000);
        v1::WorkerJobPlan& second = *busy.add_plans();
        second.set_job_id("job-2");
        *second.mutable_plan() = SlicedPlan(1024);
        second.set_predicted_tokens_per_second(900);
        *response->add_workers() = busy;
        response->set_next_page_token("next");
        return grpc::Status::OK;
      }
      *response->add_workers() = Worker("w-idle", v1::WORKER_STATE_IDLE, 5);
      if (request.include_gone()) {
        *response->add_workers() = Worker("w-gone", v1::WORKER_STATE_LOST, 600);
        v1::WorkerInfo revoked = Worker("w-bad", v1::WORKER_STATE_REVOKED, 900);
        revoked.set_revoked_reason("stolen laptop");
        revoked.mutable_revoked_at()->set_seconds(absl::ToUnixSeconds(absl::Now()) - 60);
        *response->add_workers() = revoked;
      }
      return grpc::Status::OK;
    };
  }

  absl::Status Workers(std::vector<std::string> args) {
    args.push_back("--coordinator=" + fake_->address());
    out_.str("");
    return RunWorkersCommand(args, out_);
  }

  std::vector<std::string> Lines() const { return absl::StrSplit(out_.str(), '\n', absl::SkipEmpty()); }

  std::unique_ptr<FakeCoordinator> fake_;
  std::ostringstream out_;
};

TEST_F(WorkersCommandTest, OneRowPerJobPlanAcrossPages) {
  ASSERT_TRUE(Workers({}).ok());
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 4u) << out_.str();
  EXPECT_THAT(lines[0],
              MatchesRegex("ID +DEVICE +BUDGET +STATE +JOB +PLAN +PRED TOK/S +MEAS TOK/S +HEARTBEAT"));
  EXPECT_THAT(lines[1],
              MatchesRegex("w-3f2a +cuda:0 +32.0 MiB +BUSY +job-1 +C = 256, chunked/64, reverse +12.3k "
                           "+11.0k +[0-9]s ago"));
  EXPECT_THAT(lines[2], MatchesRegex(" +job-2 +C = 1024, chunked/64, reverse +900 +-"));
  EXPECT_THAT(lines[3], MatchesRegex("w-idle +cpu +32.0 MiB +IDLE +- +- +- +- +[0-9]s ago"));
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.list_workers.size(), 2u);
  EXPECT_FALSE(calls.list_workers[0].include_gone());
  EXPECT_EQ(calls.list_workers[1].page_token(), "next");
}

TEST_F(WorkersCommandTest, AllIncludesLostWorkers) {
  ASSERT_TRUE(Workers({"--all"}).ok());
  EXPECT_TRUE(fake_->calls().list_workers[0].include_gone());
  EXPECT_THAT(out_.str(),
              MatchesRegex("(.|\n)*w-gone +cpu +32.0 MiB +LOST +- +- +- +- +10m 0[0-9]s ago\n(.|\n)*"));
  EXPECT_THAT(out_.str(), HasSubstr("w-bad revoked 1m 0"));
  EXPECT_THAT(out_.str(), HasSubstr("stolen laptop"));
}

TEST_F(WorkersCommandTest, RevokedAndQuarantinedWorkersSayWhy) {
  fake_->list_workers = [](const v1::ListWorkersRequest&, v1::ListWorkersResponse* response) {
    v1::WorkerInfo liar = Worker("w-liar", v1::WORKER_STATE_IDLE, 1);
    v1::Quarantine& quarantine = *liar.add_quarantines();
    quarantine.set_job_id("job-4");
    quarantine.set_reason("gradient disagrees with w-9c1e's by 1.2e+03");
    quarantine.mutable_since()->set_seconds(absl::ToUnixSeconds(absl::Now()) - 30);
    *response->add_workers() = liar;
    return grpc::Status::OK;
  };
  ASSERT_TRUE(Workers({}).ok());
  EXPECT_THAT(out_.str(), HasSubstr("w-liar quarantined from job-4 "));
  EXPECT_THAT(out_.str(), HasSubstr("gradient disagrees with w-9c1e's by 1.2e+03"));
}

TEST_F(WorkersCommandTest, LocalDatasetsAreListedUnderTheTable) {
  fake_->list_workers = [](const v1::ListWorkersRequest&, v1::ListWorkersResponse* response) {
    v1::WorkerInfo holder = Worker("w-home", v1::WORKER_STATE_IDLE, 1);
    v1::LocalDataset& notes = *holder.add_local_datasets();
    notes.set_name("notes");
    notes.set_tokens(120345);
    notes.set_documents(17);
    notes.set_sha256("0123456789abcdef" + std::string(48, '0'));
    v1::LocalDataset& one = *holder.add_local_datasets();
    one.set_name("letter");
    one.set_tokens(900);
    one.set_documents(1);
    one.set_sha256(std::string(64, 'f'));
    *response->add_workers() = holder;
    *response->add_workers() = Worker("w-none", v1::WORKER_STATE_IDLE, 1);
    return grpc::Status::OK;
  };
  ASSERT_TRUE(Workers({}).ok());
  EXPECT_THAT(out_.str(),
              HasSubstr("w-home holds notes: 120345 tokens in 17 documents, sha256 0123456789ab\n"));
  EXPECT_THAT(out_.str(), HasSubstr("w-home holds letter: 900 tokens in 1 document, sha256 ffffffffffff\n"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("w-none holds")));
  out_.str("");
  ASSERT_TRUE(Workers({"--json"}).ok());
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  EXPECT_EQ(json["workers"][0]["local_datasets"][0]["name"], "notes");
  EXPECT_EQ(json["workers"][0]["local_datasets"][0]["tokens"], "120345");  // int64 as a string in proto JSON
}

TEST_F(WorkersCommandTest, RevokeSendsTheIdAndReason) {
  fake_->revoke_worker = [](const v1::RevokeWorkerRequest& request, v1::WorkerInfo* response) {
    if (request.worker_id() != "w-3f2a")
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no worker " + request.worker_id());
    response->set_worker_id(request.worker_id());
    response->set_state(v1::WORKER_STATE_REVOKED);
    response->set_revoked_reason(request.reason());
    return grpc::Status::OK;
  };
  ASSERT_TRUE(Workers({"revoke", "w-3f2a", "--reason=lost laptop"}).ok());
  EXPECT_EQ(out_.str(), "revoked w-3f2a: lost laptop\n");
  ASSERT_EQ(fake_->calls().revoke_worker.size(), 1u);
  EXPECT_EQ(fake_->calls().revoke_worker[0].reason(), "lost laptop");
  EXPECT_EQ(Workers({"revoke", "w-none"}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Workers({"revoke"}).code(), absl::StatusCode::kInvalidArgument);  // no id
}

TEST_F(WorkersCommandTest, JsonAndEmpty) {
  ASSERT_TRUE(Workers({"--json"}).ok());
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  ASSERT_EQ(json["workers"].size(), 2u);
  EXPECT_EQ(json["workers"][0]["plans"][1]["job_id"], "job-2");

  fake_->list_workers = [](const v1::ListWorkersRequest&, v1::ListWorkersResponse*) {
    return grpc::Status::OK;
  };
  ASSERT_TRUE(Workers({}).ok());
  EXPECT_THAT(out_.str(), HasSubstr("no live workers"));
}

}  // namespace
}  // namespace slimfit::client
