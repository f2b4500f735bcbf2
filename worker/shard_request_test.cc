#include "worker/shard_request.h"

#include <string>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/device_profile_io.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"

namespace slimfit::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::ComputeGradientRequest GoodRequest() {
  v1::ComputeGradientRequest request;
  request.set_job_id("job-000001");
  request.set_round(3);
  request.set_shard_id(0);
  request.set_attempt(1);
  request.set_parameter_version(4);
  performer::Plan plan;
  plan.slice = 4;
  *request.mutable_plan() = planner::PlanToProto(plan);
  request.set_sequence_length(8);
  request.set_token_encoding(v1::TOKEN_ENCODING_UINT8);
  request.set_tokens(std::string("abcdefghijklmnopqrs"));  // 19 tokens: sequences of 8, 8, 3
  request.add_doc_starts(0);
  request.add_doc_starts(5);
  request.add_doc_starts(8);  // a sequence start listed explicitly
  request.add_doc_starts(10);
  request.add_doc_starts(12);
  request.add_doc_starts(17);
  request.set_loss_normalizer(100);
  return request;
}

// The ErrorDetail.field of an INVALID_ARGUMENT.
std::string FieldOf(const absl::Status& status) {
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(status);
  return detail.has_value() ? detail->field() : "<no detail>";
}

TEST(ShardRequestTest, GoodRequestPasses) {
  absl::StatusOr<performer::Plan> plan = ValidateShardRequest(GoodRequest());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->slice, 4);
}

TEST(ShardRequestTest, EveryBadFieldIsNamed) {
  struct Case {
    std::string field;
    std::function<void(v1::ComputeGradientRequest*)> corrupt;
  };
  const std::vector<Case> cases = {
      {"job_id", [](auto* r) { r->clear_job_id(); }},
      {"round", [](auto* r) { r->set_round(0); }},
      {"sequence_length", [](auto* r) { r->set_sequence_length(int64_t{1} << 40); }},
      {"shard_id", [](auto* r) { r->set_shard_id(-1); }},
      {"attempt", [](auto* r) { r->set_attempt(0); }},
      {"parameter_version", [](auto* r) { r->set_parameter_version(0); }},
      {"sequence_length", [](auto* r) { r->set_sequence_length(1); }},
      {"loss_normalizer", [](auto* r) { r->set_loss_normalizer(0); }},
      {"plan", [](auto* r) { r->clear_plan(); }},
      {"plan", [](auto* r) { r->mutable_plan()->set_slice(9); }},  // C > L
      {"plan", [](auto* r) { r->mutable_plan()->set_dtype(v1::DTYPE_UNSPECIFIED); }},
      {"plan", [](auto* r) { r->mutable_plan()->set_front_policy(v1::FRONT_POLICY_UNSPECIFIED); }},
      {"token_encoding", [](auto* r) { r->set_token_encoding(v1::TOKEN_ENCODING_UNSPECIFIED); }},
      {"tokens", [](auto* r) { r->clear_tokens(); }},
      {"tokens",
       [](auto* r) {
         r->set_token_encoding(v1::TOKEN_ENCODING_UINT16_LE);  // 19 bytes: not whole 2-byte tokens
       }},
      {"doc_starts", [](auto* r) { r->set_doc_starts(2, 5); }},  // not increasing
      {"doc_starts", [](auto* r) { r->add_doc_starts(19); }},    // past the last token
      {"doc_starts", [](auto* r) { r->set_doc_starts(0, -1); }},
  };
  for (const Case& c : cases) {
    v1::ComputeGradientRequest request = GoodRequest();
    c.corrupt(&request);
    absl::StatusOr<performer::Plan> plan = ValidateShardRequest(request);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(plan.status().message()), StartsWith(c.field)) << plan.status();
    EXPECT_EQ(FieldOf(plan.status()), c.field) << plan.status();
  }
}

TEST(ShardRequestTest, EvaluationMayFollowRoundZero) {
  v1::ComputeGradientRequest request = GoodRequest();
  request.set_round(0);
  EXPECT_EQ(ValidateShardRequest(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_evaluate_only(true);
  EXPECT_TRUE(ValidateShardRequest(request).ok());
  request.set_round(-1);
  EXPECT_EQ(ValidateShardRequest(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardRequestTest, CutsSequencesWithTheirDocumentStarts) {
  absl::StatusOr<Shard> shard = CutShard(GoodRequest(), 256);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->tokens, 19);
  ASSERT_EQ(shard->sequences.size(), 3u);
  EXPECT_EQ(shard->sequences[0].size(), 8);
  EXPECT_THAT(shard->sequences[0].doc_starts, ElementsAre(0, 5));
  EXPECT_THAT(shard->sequences[1].doc_starts, ElementsAre(0, 2, 4));
  EXPECT_THAT(shard->sequences[2].doc_starts, ElementsAre(0, 1));
  EXPECT_EQ(shard->sequences[2].size(), 3);
  EXPECT_EQ(shard->sequences[2].tokens[2], 's');
  EXPECT_EQ(shard->max_documents, 3);
}

TEST(ShardRequestTest, TokenOutsideTheVocabularyIsNamed) {
  absl::StatusOr<Shard> shard = CutShard(GoodRequest(), 100);  // 'd' = 100
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shard.status().message(), HasSubstr("tokens: token 3 = 100"));
  EXPECT_EQ(FieldOf(shard.status()), "tokens");
}

TEST(ShardRequestTest, SliceIsClampedToAShortSequence) {
  performer::Plan plan;
  plan.slice = 4;
  EXPECT_EQ(PlanForSequence(plan, 3).slice, 3);
  EXPECT_EQ(PlanForSequence(plan, 8).slice, 4);
  plan.slice = 0;
  EXPECT_EQ(PlanForSequence(plan, 3).slice, 0);
}

TEST(ShardRequestTest, BudgetCheckCountsTheRunningSumAndSaysTheNumbers) {
  absl::StatusOr<planner::DeviceProfile> profile =
      planner::ReadDeviceProfile(testing_util::RunfilePath("client/testdata/tiny_cpu.profile"));
  ASSERT_TRUE(profile.ok()) << profile.status();
  performer::ModelConfig model;
  model.vocab = 256;
  model.d_model = 32;
  model.layers = 1;
  model.heads = 2;
  model.d_ff = 64;
  performer::Plan plan;  // full back-propagation
  absl::StatusOr<Shard> shard = CutShard(GoodRequest(), 256);
  ASSERT_TRUE(shard.ok());

  absl::StatusOr<BudgetCheck> roomy = CheckBudget(model, plan, 8, *shard, true, 64 << 20, *profile, "w-1");
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  // Several sequences: the running sum is a second gradient in the prediction.
  EXPECT_EQ(roomy->needed_bytes, roomy->prediction.peak_bytes);
  EXPECT_EQ(roomy->prediction.gradient_bytes, 2 * roomy->prediction.parameter_bytes);
  EXPECT_EQ(roomy->usable_bytes, UsableBytes(64 << 20));
  absl::StatusOr<BudgetCheck> evaluate =
      CheckBudget(model, plan, 8, *shard, false, 64 << 20, *profile, "w-1");
  ASSERT_TRUE(evaluate.ok());
  EXPECT_EQ(evaluate->needed_bytes, evaluate->prediction.peak_bytes);
  EXPECT_EQ(evaluate->prediction.gradient_bytes, evaluate->prediction.parameter_bytes);

  // A budget just too small for the peak plus the running sum.
  const int64_t budget = static_cast<int64_t>(roomy->needed_bytes / 0.9) - 64;
  absl::StatusOr<BudgetCheck> tight = CheckBudget(model, plan, 8, *shard, true, budget, *profile, "w-1");
  ASSERT_EQ(tight.status().code(), absl::StatusCode::kResourceExhausted) << tight.status();
  EXPECT_THAT(std::string(tight.status().message()), StartsWith("plan needs "));
  EXPECT_THAT(tight.status().message(), HasSubstr("but worker w-1 budget allows"));
  EXPECT_THAT(tight.status().message(), HasSubstr("less a 10% margin"));
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(tight.status());
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->required_bytes(), roomy->needed_bytes);
  EXPECT_EQ(detail->budget_bytes(), budget);
  EXPECT_EQ(detail->usable_bytes(), UsableBytes(budget));
  EXPECT_EQ(UsableBytes(1000), 900);
}

// GoodRequest with local steps over its 3 sequences: 2, then 1.
v1::ComputeGradientRequest LocalStepsRequest() {
  v1::ComputeGradientRequest request = GoodRequest();
  v1::LocalSteps* local = request.mutable_local_steps();
  local->add_sequences_per_step(2);
  local->add_sequences_per_step(1);
  local->mutable_inner_optimizer()->mutable_adamw();
  local->mutable_inner_optimizer()->set_learning_rate(1e-3);
  return request;
}

TEST(ShardRequestTest, ValidLocalStepsPass) {
  absl::StatusOr<performer::Plan> plan = ValidateShardRequest(LocalStepsRequest());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->slice, 4);
  // Steps over no sequence are allowed (they are skipped), as long as the entries sum up.
  v1::ComputeGradientRequest request = LocalStepsRequest();
  request.mutable_local_steps()->clear_sequences_per_step();
  for (int64_t n : {0, 3, 0}) request.mutable_local_steps()->add_sequences_per_step(n);
  EXPECT_TRUE(ValidateShardRequest(request).ok()) << ValidateShardRequest(request).status();
}

TEST(ShardRequestTest, BadLocalStepsAreNamed) {
  struct Case {
    std::string field;
    std::string says;
    std::function<void(v1::ComputeGradientRequest*)> corrupt;
  };
  const std::vector<Case> cases = {
      {"local_steps", "local_steps: not with evaluate_only", [](auto* r) { r->set_evaluate_only(true); }},
      {"local_steps.sequences_per_step", "0 inner steps",
       [](auto* r) { r->mutable_local_steps()->clear_sequences_per_step(); }},
      {"local_steps.sequences_per_step", "entry 0 = -1 is outside [0, 3]",
       [](auto* r) {
         r->mutable_local_steps()->set_sequences_per_step(0, -1);
         r->mutable_local_steps()->set_sequences_per_step(1, 4);  // the sum is still 3
       }},
      {"local_steps.sequences_per_step", "entries sum to 4 sequences; the shard holds 3",
       [](auto* r) { r->mutable_local_steps()->set_sequences_per_step(1, 2); }},
      {"local_steps.sequences_per_step", "entries sum to 2 sequences; the shard holds 3",
       [](auto* r) { r->mutable_local_steps()->set_sequences_per_step(0, 1); }},
      // 20 tokens of L = 8 are 3 sequences (the last of 4 tokens), not 2.
      {"local_steps.sequences_per_step", "entries sum to 2 sequences; the shard holds 3",
       [](auto* r) {
         r->set_tokens(std::string(20, 'a'));
         r->mutable_local_steps()->set_sequences_per_step(0, 1);
       }},
      {"local_steps.sequences_per_step", "10001 inner steps; must be 1 to 10000",
       [](auto* r) {
         for (int i = 0; i < v1::LIMIT_MAX_LOCAL_STEPS - 1; ++i)
           r->mutable_local_steps()->add_sequences_per_step(0);
       }},
      {"local_steps.inner_optimizer", "local_steps.inner_optimizer.kind: ",
       [](auto* r) { r->mutable_local_steps()->mutable_inner_optimizer()->clear_adamw(); }},
      {"local_steps.inner_optimizer", "local_steps.inner_optimizer.learning_rate: ",
       [](auto* r) { r->mutable_local_steps()->mutable_inner_optimizer()->set_learning_rate(-1); }},
      {"local_steps.inner_optimizer", "local_steps.inner_optimizer.sgd.nesterov: ",
       [](auto* r) {
         r->mutable_local_steps()->mutable_inner_optimizer()->mutable_sgd()->set_nesterov(true);
       }},
      // An encoding from a newer protocol (or garbage) this worker cannot produce.
      {"local_steps.compression", "unknown encoding 99",
       [](auto* r) { r->mutable_local_steps()->set_compression(static_cast<v1::Compression>(99)); }},
      {"local_steps.compression", "unknown encoding -1",
       [](auto* r) { r->mutable_local_steps()->set_compression(static_cast<v1::Compression>(-1)); }},
  };
  for (const Case& c : cases) {
    v1::ComputeGradientRequest request = LocalStepsRequest();
    c.corrupt(&request);
    absl::StatusOr<performer::Plan> plan = ValidateShardRequest(request);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(std::string(plan.status().message()), StartsWith(c.field)) << plan.status();
    EXPECT_THAT(plan.status().message(), HasSubstr(c.says)) << plan.status();
    EXPECT_EQ(FieldOf(plan.status()), c.field) << plan.status();
  }
  // Exactly LIMIT_MAX_LOCAL_STEPS steps are fine.
  v1::ComputeGradientRequest request = LocalStepsRequest();
  for (int i = 0; i < v1::LIMIT_MAX_LOCAL_STEPS - 2; ++i)
    request.mutable_local_steps()->add_sequences_per_step(0);
  EXPECT_TRUE(ValidateShardRequest(request).ok()) << ValidateShardRequest(request).status();
}

TEST(ShardRequestTest, EveryKnownCompressionOfLocalStepsPasses) {
  for (v1::Compression compression :
       {v1::COMPRESSION_UNSPECIFIED, v1::COMPRESSION_NONE, v1::COMPRESSION_FLOAT16, v1::COMPRESSION_BFLOAT16,
        v1::COMPRESSION_INT8}) {
    v1::ComputeGradientRequest request = LocalStepsRequest();
    request.mutable_local_steps()->set_compression(compression);
    absl::StatusOr<performer::Plan> plan = ValidateShardRequest(request);
    EXPECT_TRUE(plan.ok()) << v1::Compression_Name(compression) << ": " << plan.status();
  }
}

TEST(ShardRequestTest, BudgetCheckAddsTheLocalStepsBytes) {
  absl::StatusOr<planner::DeviceProfile> profile =
      planner::ReadDeviceProfile(testing_util::RunfilePath("client/testdata/tiny_cpu.profile"));
  ASSERT_TRUE(profile.ok()) << profile.status();
  performer::ModelConfig model;
  model.vocab = 256;
  model.d_model = 32;
  model.layers = 1;
  model.heads = 2;
  model.d_ff = 64;
  performer::Plan plan;
  absl::StatusOr<Shard> shard = CutShard(GoodRequest(), 256);
  ASSERT_TRUE(shard.ok());
  const int64_t budget = 64 << 20;

  absl::StatusOr<BudgetCheck> alone = CheckBudget(model, plan, 8, *shard, true, budget, *profile, "w-1");
  ASSERT_TRUE(alone.ok()) << alone.status();
  const int64_t slack = alone->usable_bytes - alone->needed_bytes;
  ASSERT_GT(slack, 0);

  // Extra bytes that still fit are counted in needed_bytes, the prediction itself unchanged.
  absl::StatusOr<BudgetCheck> fits =
      CheckBudget(model, plan, 8, *shard, true, budget, *profile, "w-1", slack);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->needed_bytes, alone->needed_bytes + slack);
  EXPECT_EQ(fits->needed_bytes, fits->usable_bytes);
  EXPECT_EQ(fits->prediction.peak_bytes, alone->prediction.peak_bytes);

  // One byte more and the plan that fits alone is over the budget.
  absl::StatusOr<BudgetCheck> over =
      CheckBudget(model, plan, 8, *shard, true, budget, *profile, "w-1", slack + 1);
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_THAT(std::string(over.status().message()), StartsWith("plan needs "));
  EXPECT_THAT(over.status().message(), HasSubstr("for the local steps' parameters and optimizer state"));
  EXPECT_THAT(over.status().message(), HasSubstr("but worker w-1 budget allows"));
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(over.status());
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->required_bytes(), alone->needed_bytes + slack + 1);
  EXPECT_EQ(detail->usable_bytes(), alone->usable_bytes);
  EXPECT_EQ(detail->budget_bytes(), budget);
}

// A request whose 19 tokens (3 sequences) share the shard with two of the worker's own datasets.
v1::ComputeGradientRequest MixedRequest() {
  v1::ComputeGradientRequest request = GoodRequest();
  v1::LocalDataShard* notes = request.add_local_data();
  notes->set_sha256(std::string(64, 'a'));
  notes->add_sequences(7);
  notes->add_sequences(2);
  notes->add_positions(4);
  notes->add_positions(0);
  v1::LocalDataShard* mail = request.add_local_data();
  mail->set_sha256(std::string(64, 'b'));
  mail->add_sequences(0);
  mail->add_positions(2);
  return request;
}

// A shard of `n` local sequences of 8 tokens, every token = `token`, one document each.
Shard LocalSequences(int n, int64_t token) {
  Shard shard;
  for (int i = 0; i < n; ++i) {
    performer::PackedBatch batch;
    batch.tokens.assign(8, token + i);
    batch.doc_starts = {0};
    shard.sequences.push_back(batch);
  }
  shard.tokens = 8 * n;
  return shard;
}

TEST(ShardRequestTest, LocalSequencesTakeTheirPositionsAndTokensFillTheRest) {
  const v1::ComputeGradientRequest request = MixedRequest();
  ASSERT_TRUE(ValidateShardRequest(request).ok()) << ValidateShardRequest(request).status();
  std::vector<Shard> local;
  local.push_back(LocalSequences(2, 200));  // notes: positions 4, 0
  local.push_back(LocalSequences(1, 100));  // mail: position 2
  absl::StatusOr<Shard> shard = AssembleShard(request, 256, std::move(local));
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_EQ(shard->sequences.size(), 6u);
  EXPECT_EQ(shard->sequences[0].tokens[0], 201);  // notes' second sequence
  EXPECT_EQ(shard->sequences[1].tokens[0], 'a');  // the tokens' first sequence
  EXPECT_EQ(shard->sequences[2].tokens[0], 100);  // mail
  EXPECT_EQ(shard->sequences[3].tokens[0], 'i');  // the tokens' second sequence
  EXPECT_EQ(shard->sequences[4].tokens[0], 200);  // notes' first sequence
  EXPECT_EQ(shard->sequences[5].tokens[0], 'q');  // the tokens' last (3 tokens)
  EXPECT_EQ(shard->tokens, 19 + 3 * 8);
  EXPECT_EQ(shard->max_documents, 3);  // "ijklmnop" holds starts 8, 10, 12

  // One dataset's entry alone is the whole shard, without positions.
  v1::ComputeGradientRequest whole = GoodRequest();
  whole.clear_tokens();
  whole.clear_doc_starts();
  *whole.add_local_data() = MixedRequest().local_data(0);
  whole.mutable_local_data(0)->clear_positions();
  ASSERT_TRUE(ValidateShardRequest(whole).ok()) << ValidateShardRequest(whole).status();
  std::vector<Shard> only;
  only.push_back(LocalSequences(2, 50));
  shard = AssembleShard(whole, 256, std::move(only));
  ASSERT_TRUE(shard.ok());
  ASSERT_EQ(shard->sequences.size(), 2u);
  EXPECT_EQ(shard->sequences[1].tokens[0], 51);
}

TEST(ShardRequestTest, LocalDataEntriesAreCheckedFieldByField) {
  struct Case {
    std::string field;
    std::string message;
    std::function<void(v1::ComputeGradientRequest*)> corrupt;
  };
  const std::vector<Case> cases = {
      {"local_data[0].sha256", "64 lowercase", [](auto* r) { r->mutable_local_data(0)->set_sha256("ab"); }},
      {"local_data[1].sha256", "the same dataset as local_data[0]",
       [](auto* r) { r->mutable_local_data(1)->set_sha256(std::string(64, 'a')); }},
      {"local_data[1].sequences", "empty", [](auto* r) { r->mutable_local_data(1)->clear_sequences(); }},
      {"local_data[0].sequences", "entry 1 = -1 is negative",
       [](auto* r) { r->mutable_local_data(0)->set_sequences(1, -1); }},
      {"local_data[0].positions", "positions are required",
       [](auto* r) { r->mutable_local_data(0)->clear_positions(); }},
      {"local_data[1].positions", "entry 0 = 4 is outside [0, 6) or taken",
       [](auto* r) { r->mutable_local_data(1)->set_positions(0, 4); }},
      {"local_data[1].positions", "entry 0 = 6 is outside [0, 6)",
       [](auto* r) { r->mutable_local_data(1)->set_positions(0, 6); }},
      {"local_data", "the shard holds 131079 sequences; at most 131072",
       [](auto* r) {
         for (int i = 0; i < 131073; ++i) {
           r->mutable_local_data(1)->add_sequences(i);
           r->mutable_local_data(1)->add_positions(6 + i);
         }
       }},
  };
  for (const Case& c : cases) {
    v1::ComputeGradientRequest request = MixedRequest();
    c.corrupt(&request);
    absl::StatusOr<performer::Plan> plan = ValidateShardRequest(request);
    ASSERT_FALSE(plan.ok()) << c.field;
    EXPECT_EQ(FieldOf(plan.status()), c.field) << plan.status();
    EXPECT_THAT(plan.status().message(), HasSubstr(c.message)) << c.field;
  }
  // A local-steps request counts local sequences in its per-step sums.
  v1::ComputeGradientRequest stepped = MixedRequest();
  stepped.mutable_local_steps()->add_sequences_per_step(3);
  stepped.mutable_local_steps()->add_sequences_per_step(3);
  stepped.mutable_local_steps()->mutable_inner_optimizer()->mutable_sgd();
  stepped.mutable_local_steps()->mutable_inner_optimizer()->set_learning_rate(0.1);
  EXPECT_TRUE(ValidateShardRequest(stepped).ok()) << ValidateShardRequest(stepped).status();
  stepped.mutable_local_steps()->set_sequences_per_step(1, 2);
  EXPECT_THAT(ValidateShardRequest(stepped).status().message(),
              HasSubstr("sum to 5 sequences; the shard holds 6"));
}

}  // namespace
}  // namespace slimfit::worker
