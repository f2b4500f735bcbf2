#include "planner/plan_request_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rpc/rpc_util.h"

namespace slimfit::planner {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

PlanRequestInputs Inputs() {
  PlanRequestInputs inputs;
  inputs.model.d_model = 64;
  inputs.sequence_length = 128;
  inputs.documents = 3;
  return inputs;
}

// INVALID_ARGUMENT "<field>: …" whose ErrorDetail names `field`.
void ExpectInvalidField(const absl::Status& status, const std::string& field) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field << ": " << status;
  EXPECT_THAT(std::string(status.message()), StartsWith(field + ": ")) << status;
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(status);
  ASSERT_TRUE(detail.has_value()) << status;
  EXPECT_EQ(detail->field(), field) << status;
}

TEST(PlanRequestBuilderTest, EveryInputLandsInTheRequest) {
  PlanRequestInputs inputs = Inputs();
  inputs.sequences_per_shard = 2;
  inputs.optimizer_bytes_per_parameter = 8;
  inputs.memory_budget_bytes = 64 << 20;
  inputs.objective = Objective::kMemory;
  inputs.bf16_products = true;
  inputs.safety_margin = 0.25;
  absl::StatusOr<PlanSearchRequest> request = BuildPlanSearchRequest(inputs);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->workload.model.d_model, 64);
  EXPECT_EQ(request->workload.seq_len, 128);
  EXPECT_EQ(request->workload.documents, 3);
  EXPECT_TRUE(request->workload.gradient_sum);
  EXPECT_EQ(request->workload.optimizer_bytes_per_parameter, 8);
  EXPECT_EQ(request->memory_budget_bytes, 64 << 20);
  EXPECT_EQ(request->objective, Objective::kMemory);
  EXPECT_EQ(request->dtype, performer::DType::kFloat32);
  EXPECT_TRUE(request->bf16_products);
  EXPECT_EQ(request->safety_margin, 0.25);

  inputs.sequences_per_shard = 1;  // one sequence a shard: no running sum
  inputs.memory_budget_bytes.reset();
  request = BuildPlanSearchRequest(inputs);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_FALSE(request->workload.gradient_sum);
  EXPECT_EQ(request->memory_budget_bytes, 0);  // for the caller to set per worker
}

TEST(PlanRequestBuilderTest, BadInputsNameTheCallersField) {
  PlanRequestFields flags;
  flags.sequence_length = "--seq_len";
  flags.documents = "--documents";
  flags.sequences_per_shard = "--sequences_per_shard";
  flags.memory_budget_bytes = "--memory_budget";
  flags.safety_margin = "--safety_margin";
  flags.bf16_products = "--bf16_products";
  struct Case {
    std::string field;
    std::function<void(PlanRequestInputs*)> corrupt;
  };
  const std::vector<Case> cases = {
      {"--seq_len", [](PlanRequestInputs* i) { i->sequence_length = 0; }},
      {"--documents", [](PlanRequestInputs* i) { i->documents = 0; }},
      {"--documents", [](PlanRequestInputs* i) { i->documents = 129; }},
      {"--sequences_per_shard", [](PlanRequestInputs* i) { i->sequences_per_shard = 0; }},
      {"--memory_budget", [](PlanRequestInputs* i) { i->memory_budget_bytes = 0; }},
      {"--safety_margin", [](PlanRequestInputs* i) { i->safety_margin = 1; }},
      {"--safety_margin", [](PlanRequestInputs* i) { i->safety_margin = -0.01; }},
      {"--bf16_products",
       [](PlanRequestInputs* i) {
         i->dtype = performer::DType::kFloat64;
         i->bf16_products = true;
       }},
  };
  for (const Case& c : cases) {
    PlanRequestInputs inputs = Inputs();
    c.corrupt(&inputs);
    ExpectInvalidField(BuildPlanSearchRequest(inputs, flags).status(), c.field);
  }
  PlanRequestInputs too_many = Inputs();
  too_many.documents = 129;
  EXPECT_EQ(BuildPlanSearchRequest(too_many).status().message(),
            "documents: must be between 1 and sequence_length (128), got 129");
}

TEST(PlanRequestBuilderTest, CheckDocumentsBoundsBothEnds) {
  EXPECT_TRUE(CheckDocuments(1, 1, "d", "l").ok());
  EXPECT_TRUE(CheckDocuments(64, 64, "d", "l").ok());
  EXPECT_EQ(CheckDocuments(0, 64, "d", "l").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckDocuments(65, 64, "spec.documents", "spec.sequence_length").message(),
            "spec.documents: must be between 1 and spec.sequence_length (64), got 65");
}

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_sequence_length(128);
  spec.set_tokens_per_round(512);  // 4 sequences a round
  spec.set_bf16_products(true);
  return spec;
}

TEST(PlanRequestBuilderTest, AJobsShardsHoldTheRoundUnlessTheCoordinatorCapsThem) {
  EXPECT_EQ(JobSequencesPerShard(4, 0), 4);
  EXPECT_EQ(JobSequencesPerShard(4, 2), 2);
  EXPECT_EQ(JobSequencesPerShard(4, 8), 4);
  EXPECT_EQ(JobSequencesPerShard(4, 1), 1);
}

TEST(PlanRequestBuilderTest, AJobsPlanSearchTakesItsWorkloadDtypeProductsAndShardCap) {
  performer::ModelConfig config;
  config.d_model = 64;
  absl::StatusOr<PlanSearchRequest> request = JobPlanSearchRequest(Spec(), config, 3, 0, 0.2);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->workload.model.d_model, 64);
  EXPECT_EQ(request->workload.seq_len, 128);
  EXPECT_EQ(request->workload.documents, 3);
  EXPECT_TRUE(request->workload.gradient_sum);  // 4 sequences a round, one worker may get them all
  EXPECT_EQ(request->dtype, performer::DType::kFloat32);
  EXPECT_TRUE(request->bf16_products);
  EXPECT_EQ(request->safety_margin, 0.2);
  EXPECT_EQ(request->memory_budget_bytes, 0);
  EXPECT_EQ(request->workload.optimizer_bytes_per_parameter, 0);  // the optimizer steps on the coordinator

  // --max_sequences_per_shard=1: every shard is one sequence, so no running gradient sum.
  request = JobPlanSearchRequest(Spec(), config, 3, 1, 0.2);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_FALSE(request->workload.gradient_sum);

  v1::JobSpec wide = Spec();
  wide.set_tokens_per_round(128);
  wide.set_dtype(v1::DTYPE_FLOAT64);
  wide.set_bf16_products(false);
  request = JobPlanSearchRequest(wide, config, 1, 0, 0.1);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_FALSE(request->workload.gradient_sum);
  EXPECT_EQ(request->dtype, performer::DType::kFloat64);
  EXPECT_FALSE(request->bf16_products);

  wide.set_bf16_products(true);
  ExpectInvalidField(JobPlanSearchRequest(wide, config, 1, 0, 0.1).status(), "spec.bf16_products");
  EXPECT_THAT(std::string(JobPlanSearchRequest(Spec(), config, 129, 0, 0.1).status().message()),
              HasSubstr("documents: must be between 1 and spec.sequence_length (128), got 129"));
}

}  // namespace
}  // namespace slimfit::planner
