#include "client/coordinator_plan_command.h"

#include <sstream>
#include <string>
#include <vector>

#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace slimfit::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

v1::PlanCandidate Candidate(int64_t slice, int64_t peak, double seconds) {
  v1::PlanCandidate candidate;
  v1::Plan& plan = *candidate.mutable_plan();
  plan.set_slice(slice);
  plan.set_dtype(v1::DTYPE_FLOAT32);
  if (slice > 0) {
    plan.set_prefix_mode(v1::PREFIX_MODE_CHUNKED);
    plan.set_block(64);
    plan.set_front_policy(v1::FRONT_POLICY_REVERSE);
  }
  candidate.mutable_prediction()->set_peak_bytes(peak);
  candidate.mutable_prediction()->set_seconds(seconds);
  return candidate;
}

v1::MemoryPlan Fits(const std::string& worker) {
  v1::MemoryPlan plan;
  plan.set_worker_id(worker);
  plan.set_memory_budget_bytes(int64_t{32} << 20);
  plan.set_usable_bytes(30198988);
  plan.set_sequence_length(4096);
  plan.set_documents(1);
  plan.set_objective(v1::OBJECTIVE_TIME);
  *plan.mutable_chosen() = Candidate(256, int64_t{20} << 20, 1.23);
  *plan.mutable_full_backprop() = Candidate(0, int64_t{120} << 20, 0.9);
  plan.set_reason("fastest plan under 28.8 MiB: C = 256, chunked/64, reverse");
  return plan;
}

v1::MemoryPlan Refused(const std::string& worker) {
  v1::MemoryPlan plan;
  plan.set_worker_id(worker);
  plan.set_memory_budget_bytes(int64_t{16} << 20);
  plan.set_usable_bytes(15099494);
  plan.set_sequence_length(4096);
  plan.set_documents(1);
  plan.set_objective(v1::OBJECTIVE_TIME);
  *plan.mutable_full_backprop() = Candidate(0, int64_t{120} << 20, 0.9);
  plan.set_refusal(
      "needs at least 37.5 MiB at C = 1 (parameters and gradients alone 30.0 MiB); the budget allows "
      "14.4 MiB (16 MiB less a 10% margin)");
  plan.set_reason(plan.refusal());
  plan.set_least_peak_bytes(39321600);
  return plan;
}

class CoordinatorPlanTest : public ::testing::Test {
 protected:
  CoordinatorPlanTest() : fake_(FakeCoordinator::Start()) {
    fake_->get_memory_plan = [](const v1::GetMemoryPlanRequest& request,
                                v1::GetMemoryPlanResponse* response) {
      if (request.has_worker_id()) {
        if (request.worker_id() == "w-small") {
          *response->add_plans() = Refused("w-small");
          return grpc::Status::OK;
        }
        if (request.worker_id() != "w-3f2a")
          return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown worker");
        v1::MemoryPlan plan = Fits("w-3f2a");
        *plan.add_frontier() = Candidate(64, int64_t{12} << 20, 2.5);
        *plan.add_frontier() = plan.chosen();
        plan.set_candidates_considered(120);
        *response->add_plans() = plan;
        return grpc::Status::OK;
      }
      if (request.page_token().empty()) {
        *response->add_plans() = Fits("w-3f2a");
        response->set_next_page_token("2");
      } else {
        *response->add_plans() = Refused("w-small");
      }
      return grpc::Status::OK;
    };
  }

  absl::Status Plan(std::vector<std::string> args) {
    args.push_back("--coordinator=" + fake_->address());
    out_.str("");
    return RunCoordinatorPlanCommand(args, out_);
  }

  std::unique_ptr<FakeCoordinator> fake_;
  std::ostringstream out_;
};

TEST(IsCoordinatorPlanTest, WorkerOrAllInAnyForm) {
  EXPECT_TRUE(IsCoordinatorPlan({"--seq_len=4", "--all"}));
  EXPECT_TRUE(IsCoordinatorPlan({"--all=true"}));
  EXPECT_TRUE(IsCoordinatorPlan({"--worker=w-1"}));
  EXPECT_TRUE(IsCoordinatorPlan({"--worker", "w-1"}));
  EXPECT_FALSE(IsCoordinatorPlan({"--all=false", "--seq_len=4"}));
  EXPECT_FALSE(IsCoordinatorPlan({"--noall"}));
  EXPECT_FALSE(IsCoordinatorPlan({"--profile=x", "--seq_len=4"}));
}

TEST_F(CoordinatorPlanTest, AllWorkersShowsPlansAndRefusals) {
  const absl::Status status = Plan({"--all", "--job=job-1"});
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(
      out_.str(),
      "worker w-3f2a: budget 32.0 MiB (28.8 MiB usable), L = 4096, 1 document, objective time\n"
      "  chosen          C = 256, chunked/64, reverse\n"
      "  predicted       peak 20.0 MiB, 1.23 s per sequence\n"
      "  reason          fastest plan under 28.8 MiB: C = 256, chunked/64, reverse\n"
      "  full backprop   peak 120.0 MiB, 0.9 s per sequence (does not fit the budget)\n"
      "\n"
      "worker w-small: budget 16.0 MiB (14.4 MiB usable), L = 4096, 1 document, objective time\n"
      "  refused         needs at least 37.5 MiB at C = 1 (parameters and gradients alone 30.0 MiB); the "
      "budget allows 14.4 MiB (16 MiB less a 10% margin)\n"
      "  least peak      37.5 MiB\n"
      "  full backprop   peak 120.0 MiB, 0.9 s per sequence (does not fit the budget)\n");
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.get_memory_plan.size(), 2u);
  EXPECT_TRUE(calls.get_memory_plan[0].all_workers());
  EXPECT_EQ(calls.get_memory_plan[0].job_id(), "job-1");
  EXPECT_EQ(calls.get_memory_plan[0].objective(), v1::OBJECTIVE_TIME);
  EXPECT_FALSE(calls.get_memory_plan[0].has_dtype());  // the job's own
  EXPECT_FALSE(calls.get_memory_plan[0].has_safety_margin());
  EXPECT_EQ(calls.get_memory_plan[1].page_token(), "2");
}

TEST_F(CoordinatorPlanTest, OneWorkerWithAModelSpecAndFrontier) {
  const absl::Status status = Plan(
      {"--worker=w-3f2a", "--d_model=512", "--layers=8", "--heads=8", "--seq_len=65536", "--documents=4",
       "--features=favor+", "--objective=memory", "--dtype=float64", "--safety_margin=0.2", "--frontier"});
  ASSERT_TRUE(status.ok()) << status;
  const v1::GetMemoryPlanRequest request = fake_->calls().get_memory_plan.at(0);
  EXPECT_EQ(request.worker_id(), "w-3f2a");
  EXPECT_EQ(request.spec().model().config().d_model(), 512);
  EXPECT_EQ(request.spec().model().config().feature_map(), v1::FEATURE_MAP_FAVOR);
  EXPECT_EQ(request.spec().sequence_length(), 65536);
  EXPECT_EQ(request.spec().documents(), 4);
  EXPECT_EQ(request.objective(), v1::OBJECTIVE_MEMORY);
  EXPECT_EQ(request.dtype(), v1::DTYPE_FLOAT64);
  EXPECT_EQ(request.safety_margin(), 0.2);
  EXPECT_TRUE(request.include_frontier());
  EXPECT_THAT(out_.str(), HasSubstr("  Pareto frontier: 2 plans of 120 candidates (* chosen)\n"));
  EXPECT_THAT(out_.str(), HasSubstr("     C = 64, chunked/64, reverse   12.0 MiB   2.5 s\n"));
  EXPECT_THAT(out_.str(), HasSubstr("  *  C = 256, chunked/64, reverse  20.0 MiB  1.23 s\n"));
}

TEST_F(CoordinatorPlanTest, OneWorkerThatFitsNothingExitsOne) {
  const absl::Status status = Plan({"--worker=w-small", "--job=job-1"});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(status), StartsWith("worker w-small: no plan fits: needs at least 37.5 MiB"));
}

TEST_F(CoordinatorPlanTest, UnknownWorkerIsNotFound) {
  const absl::Status status = Plan({"--worker=w-nope", "--job=job-1"});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(status), "GetMemoryPlan: unknown worker");
}

TEST_F(CoordinatorPlanTest, JsonHoldsEveryPage) {
  ASSERT_TRUE(Plan({"--all", "--job=job-1", "--json"}).ok());
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  ASSERT_EQ(json["plans"].size(), 2u);
  EXPECT_EQ(json["plans"][1]["worker_id"], "w-small");
  EXPECT_THAT(json["plans"][1]["refusal"].get<std::string>(), StartsWith("needs at least"));
}

TEST_F(CoordinatorPlanTest, RefusesConflictingAndOfflineFlags) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"--all", "--profile=cpu.profile", "--seq_len=4"}, "--profile belongs to the offline 'slimfit plan'"},
      {{"--worker=w", "--memory_budget=2GiB", "--seq_len=4"}, "--memory_budget belongs to the offline"},
      {{"--all", "--device", "cpu", "--seq_len=4"}, "--device belongs to the offline"},
      {{"--all", "--worker=w", "--job=j"}, "exactly one of --worker=ID and --all"},
      {{"--all"}, "give --job=ID, or a model (model flags) and --seq_len=L"},
      {{"--all", "--job=j", "--d_model=64"}, "--job takes the model, L and documents from the job"},
      {{"--all", "--seq_len=0"}, "--seq_len=0: expected at least 1 token"},
      {{"--all", "--seq_len=8", "--documents=9"}, "--documents: must be between 1 and --seq_len (8), got 9"},
      {{"--all", "--job=j", "--objective=speed"}, "--objective=speed: expected time or memory"},
      {{"--all", "--job=j", "--safety_margin=1"}, "--safety_margin=1: expected 0 <= margin < 1"},
  };
  for (const Case& c : cases) {
    const absl::Status status = Plan(c.args);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(Message(status), HasSubstr(c.message));
  }
  EXPECT_TRUE(fake_->calls().get_memory_plan.empty());
}

TEST_F(CoordinatorPlanTest, HelpSaysHowItDiffersFromTheOfflinePlan) {
  ASSERT_TRUE(Plan({"--all", "--help"}).ok());
  EXPECT_THAT(out_.str(), StartsWith("usage: slimfit plan (--worker=ID | --all)"));
  EXPECT_THAT(out_.str(), HasSubstr("Without --worker or --all"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("--profile")));
}

}  // namespace
}  // namespace slimfit::client
