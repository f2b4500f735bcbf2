#include "worker/plan_request.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"

namespace slimfit::worker {
namespace {

v1::PlanRequest SmallRequest() {
  v1::PlanRequest request;
  request.mutable_model()->set_d_model(64);
  request.mutable_model()->set_heads(4);
  request.set_sequence_length(256);
  return request;
}

// The field named in the message and in ErrorDetail.field.
std::string FieldOf(const absl::Status& status) {
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(status);
  return detail.has_value() ? detail->field() : "";
}

TEST(ValidatePlanRequestTest, DefaultsComeFromTheProtoAndTheWorker) {
  absl::StatusOr<planner::PlanSearchRequest> search = ValidatePlanRequest(SmallRequest(), 1 << 30);
  ASSERT_TRUE(search.ok()) << search.status();
  EXPECT_EQ(search->workload.model.d_model, 64);
  EXPECT_EQ(search->workload.seq_len, 256);
  EXPECT_EQ(search->workload.documents, 1);
  EXPECT_EQ(search->memory_budget_bytes, 1 << 30);
  EXPECT_EQ(search->objective, planner::Objective::kTime);
  EXPECT_EQ(search->dtype, performer::DType::kFloat32);
  EXPECT_DOUBLE_EQ(search->safety_margin, 0.10);
}

TEST(ValidatePlanRequestTest, GivenFieldsWin) {
  v1::PlanRequest request = SmallRequest();
  request.set_documents(3);
  request.set_memory_budget_bytes(12345);
  request.set_objective(v1::OBJECTIVE_MEMORY);
  request.set_dtype(v1::DTYPE_FLOAT64);
  request.set_safety_margin(0);
  absl::StatusOr<planner::PlanSearchRequest> search = ValidatePlanRequest(request, 1 << 30);
  ASSERT_TRUE(search.ok()) << search.status();
  EXPECT_EQ(search->workload.documents, 3);
  EXPECT_EQ(search->memory_budget_bytes, 12345);
  EXPECT_EQ(search->objective, planner::Objective::kMemory);
  EXPECT_EQ(search->dtype, performer::DType::kFloat64);
  EXPECT_DOUBLE_EQ(search->safety_margin, 0);
}

TEST(ValidatePlanRequestTest, RefusalsNameTheField) {
  struct Case {
    const char* field;
    void (*change)(v1::PlanRequest*);
  };
  const Case cases[] = {
      {"model", [](v1::PlanRequest* r) { r->clear_model(); }},
      {"model", [](v1::PlanRequest* r) { r->mutable_model()->set_heads(3); }},
      {"sequence_length", [](v1::PlanRequest* r) { r->set_sequence_length(0); }},
      {"documents", [](v1::PlanRequest* r) { r->set_documents(0); }},
      // More documents than tokens: a fuzzing finding (the search then had no candidate: INTERNAL).
      {"documents", [](v1::PlanRequest* r) { r->set_documents(r->sequence_length() + 1); }},
      {"memory_budget_bytes", [](v1::PlanRequest* r) { r->set_memory_budget_bytes(-1); }},
      {"objective", [](v1::PlanRequest* r) { r->set_objective(static_cast<v1::Objective>(7)); }},
      {"dtype", [](v1::PlanRequest* r) { r->set_dtype(v1::DTYPE_UNSPECIFIED); }},
      {"safety_margin", [](v1::PlanRequest* r) { r->set_safety_margin(1); }},
  };
  for (const Case& c : cases) {
    v1::PlanRequest request = SmallRequest();
    c.change(&request);
    absl::StatusOr<planner::PlanSearchRequest> search = ValidatePlanRequest(request, 1 << 30);
    EXPECT_EQ(search.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(FieldOf(search.status()), c.field);
  }
}

}  // namespace
}  // namespace slimfit::worker
