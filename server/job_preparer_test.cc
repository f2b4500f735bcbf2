#include "server/job_preparer.h"

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;

class JobPreparerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(testing_util::TempPath("state.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // A spec that passes every check before the datasets are looked up.
  static v1::JobSpec Spec(int64_t vocab, int64_t d_model) {
    v1::JobSpec spec;
    v1::ModelConfig* config = spec.mutable_model()->mutable_config();
    config->set_vocab(vocab);
    config->set_d_model(d_model);
    config->set_layers(1);
    config->set_heads(4);
    config->set_d_ff(16);
    spec.add_dataset_ids("ds-none");
    spec.set_sequence_length(32);
    spec.set_tokens_per_round(64);
    spec.set_rounds(1);
    spec.mutable_optimizer()->mutable_adamw();
    spec.mutable_optimizer()->set_learning_rate(1e-3);
    return spec;
  }

  std::unique_ptr<StateStore> store_;
};

// Found by fuzz/coordinator_requests_fuzzer.cc: a valid config of 2^40 parameters made SubmitJob
// allocate 4 TiB for a fresh model (AddressSanitizer: allocation-size-too-big); sizes below the
// machine's memory but above what it can spare would have been drawn and written.
TEST_F(JobPreparerTest, RefusesAModelAboveTheLimitBeforeAllocatingIt) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 20);
  const v1::JobSpec spec = Spec(int64_t{1} << 20, int64_t{1} << 20);
  absl::StatusOr<PreparedJob> prepared = preparer.Prepare(spec, /*load_initial=*/true);
  ASSERT_EQ(prepared.status().code(), absl::StatusCode::kResourceExhausted) << prepared.status();
  EXPECT_THAT(std::string(prepared.status().message()),
              HasSubstr("spec.model: 4947845316624 parameters take 18.0 TiB in float32; this coordinator "
                        "trains models of up to 1.0 MiB (--max_model_bytes)"));
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(prepared.status());
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->required_bytes(), int64_t{4947845316624} * 4);
  EXPECT_EQ(detail->limit_bytes(), int64_t{1} << 20);
}

TEST_F(JobPreparerTest, CountsTheJobsDtype) {
  // vocab 256, d_model 8, one layer with d_ff 16: 3,856 parameters, 15,424 bytes in float32.
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/20000);
  v1::JobSpec spec = Spec(256, 8);
  spec.mutable_model()->mutable_config()->set_heads(2);
  // Within the limit in float32: the next check (the unknown dataset) answers.
  EXPECT_EQ(preparer.Prepare(spec, /*load_initial=*/false).status().code(), absl::StatusCode::kNotFound);
  spec.set_dtype(v1::DTYPE_FLOAT64);
  EXPECT_EQ(preparer.Prepare(spec, /*load_initial=*/false).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(JobPreparerTest, Bf16ProductsNeedFloat32) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  v1::JobSpec spec = Spec(256, 16);
  spec.set_bf16_products(true);
  // Valid in float32 (the default): the next check (the unknown dataset) answers.
  EXPECT_EQ(preparer.Prepare(spec, /*load_initial=*/false).status().code(), absl::StatusCode::kNotFound);
  spec.set_dtype(v1::DTYPE_FLOAT64);
  const absl::Status refused = preparer.Prepare(spec, /*load_initial=*/false).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("spec.bf16_products"));
}

// A local-steps spec as WithJobDefaults leaves it: the datasets are the first thing it fails on.
v1::JobSpec LocalStepsSpec(v1::JobSpec spec) {
  spec.set_local_steps(4);
  spec.mutable_outer_optimizer()->mutable_sgd()->set_momentum(0.9);
  spec.mutable_outer_optimizer()->mutable_sgd()->set_nesterov(true);
  spec.mutable_outer_optimizer()->set_learning_rate(0.7);
  spec.set_verify_fraction(0);
  return spec;
}

// The submission (--rounds=9000000000000000000 --tokens_per_round=1024) was accepted:
// rounds · tokens_per_round overflowed the job's token counters. The bounds themselves:
// job_bounds_test.
TEST_F(JobPreparerTest, RefusesRoundsWhoseTokensOverflowTheCounters) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  v1::JobSpec spec = Spec(256, 16);
  spec.set_tokens_per_round(1024);
  spec.set_rounds(std::numeric_limits<int64_t>::max() / 1024);
  // Within the bound: the next check (the unknown dataset) answers.
  EXPECT_EQ(preparer.Prepare(spec, /*load_initial=*/false).status().code(), absl::StatusCode::kNotFound);
  spec.set_rounds(9000000000000000000);
  const absl::Status refused = preparer.Prepare(spec, /*load_initial=*/false).status();
  ASSERT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("spec.rounds: 9000000000000000000 rounds of 1024"));
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(refused);
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->field(), "spec.rounds");
}

TEST_F(JobPreparerTest, ValidatesLocalSteps) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  const v1::JobSpec good = LocalStepsSpec(Spec(256, 16));
  // Valid: the next check (the unknown dataset) answers.
  EXPECT_EQ(preparer.Prepare(good, /*load_initial=*/false).status().code(), absl::StatusCode::kNotFound);
  v1::JobSpec most = good;
  most.set_local_steps(v1::LIMIT_MAX_LOCAL_STEPS);
  EXPECT_EQ(preparer.Prepare(most, /*load_initial=*/false).status().code(), absl::StatusCode::kNotFound);
  v1::JobSpec unset_verification = good;
  unset_verification.clear_verify_fraction();  // reads as 0
  EXPECT_EQ(preparer.Prepare(unset_verification, false).status().code(), absl::StatusCode::kNotFound);

  struct Case {
    std::string field;  // the message's start and ErrorDetail.field
    std::string says;
    std::function<void(v1::JobSpec*)> corrupt;
  };
  const std::vector<Case> cases = {
      {"spec.local_steps", "must be 1 to 10000, got 0", [](auto* s) { s->set_local_steps(0); }},
      {"spec.local_steps", "must be 1 to 10000, got 10001",
       [](auto* s) { s->set_local_steps(v1::LIMIT_MAX_LOCAL_STEPS + 1); }},
      {"spec.local_steps", "got -3", [](auto* s) { s->set_local_steps(-3); }},
      {"spec.verify_fraction", "must be 0 with local_steps", [](auto* s) { s->set_verify_fraction(0.05); }},
      {"spec.outer_optimizer", "only with local_steps", [](auto* s) { s->clear_local_steps(); }},
      {"spec.outer_optimizer.kind", "set adamw or sgd", [](auto* s) { s->clear_outer_optimizer(); }},
      {"spec.outer_optimizer.learning_rate", "required for SGD",
       [](auto* s) { s->mutable_outer_optimizer()->clear_learning_rate(); }},
      {"spec.outer_optimizer.sgd.momentum", "must be in [0, 1)",
       [](auto* s) { s->mutable_outer_optimizer()->mutable_sgd()->set_momentum(1.0); }},
      {"spec.outer_optimizer.warmup_steps", "must be ≥ 0",
       [](auto* s) { s->mutable_outer_optimizer()->set_warmup_steps(-1); }},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = good;
    c.corrupt(&spec);
    absl::StatusOr<PreparedJob> prepared = preparer.Prepare(spec, /*load_initial=*/false);
    EXPECT_EQ(prepared.status().code(), absl::StatusCode::kInvalidArgument)
        << c.says << ": " << prepared.status();
    EXPECT_THAT(std::string(prepared.status().message()), ::testing::StartsWith(c.field + ": "))
        << prepared.status();
    EXPECT_THAT(prepared.status().message(), HasSubstr(c.says)) << prepared.status();
    std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(prepared.status());
    ASSERT_TRUE(detail.has_value()) << c.says;
    EXPECT_EQ(detail->field(), c.field) << prepared.status();
  }

  // The inner optimizer is still checked as spec.optimizer.
  v1::JobSpec bad_inner = good;
  bad_inner.mutable_optimizer()->set_learning_rate(0);
  EXPECT_THAT(std::string(preparer.Prepare(bad_inner, false).status().message()),
              ::testing::StartsWith("spec.optimizer.learning_rate: "));
}

// Expects `prepared` to be INVALID_ARGUMENT about `field`, saying `says`.
void ExpectInvalidField(const absl::StatusOr<PreparedJob>& prepared, const std::string& field,
                        const std::string& says) {
  EXPECT_EQ(prepared.status().code(), absl::StatusCode::kInvalidArgument) << prepared.status();
  EXPECT_THAT(std::string(prepared.status().message()), ::testing::StartsWith(field + ": "))
      << prepared.status();
  EXPECT_THAT(std::string(prepared.status().message()), HasSubstr(says)) << prepared.status();
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(prepared.status());
  ASSERT_TRUE(detail.has_value()) << prepared.status();
  EXPECT_EQ(detail->field(), field) << prepared.status();
}

TEST_F(JobPreparerTest, RefusesUnknownCompressionNamingTheField) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  const v1::JobSpec good = LocalStepsSpec(Spec(256, 16));
  for (const bool local_steps : {true, false}) {
    v1::JobSpec base = local_steps ? good : Spec(256, 16);
    v1::JobSpec pseudo = base;
    pseudo.mutable_compression()->set_pseudo_gradients(static_cast<v1::Compression>(99));
    pseudo.mutable_compression()->set_parameters(v1::COMPRESSION_NONE);
    ExpectInvalidField(preparer.Prepare(pseudo, /*load_initial=*/false), "spec.compression.pseudo_gradients",
                       "unknown encoding 99");
    v1::JobSpec parameters = base;
    parameters.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_NONE);
    parameters.mutable_compression()->set_parameters(static_cast<v1::Compression>(99));
    ExpectInvalidField(preparer.Prepare(parameters, /*load_initial=*/false), "spec.compression.parameters",
                       "unknown encoding 99");
    // A negative value is no encoding either.
    parameters.mutable_compression()->set_parameters(static_cast<v1::Compression>(-1));
    ExpectInvalidField(preparer.Prepare(parameters, /*load_initial=*/false), "spec.compression.parameters",
                       "unknown encoding -1");
  }
}

TEST_F(JobPreparerTest, ValidatesTheTrainableSubset) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  v1::JobSpec spec = Spec(256, 16);
  spec.set_trainable("layers.7.*");
  ExpectInvalidField(preparer.Prepare(spec, /*load_initial=*/false), "spec.trainable",
                     "'layers.7.*' matches no parameter; the model's are ");
  spec.set_trainable("layers.0.*,output_logit_map.*");
  // Valid: the next check (the unknown dataset) answers.
  EXPECT_EQ(preparer.Prepare(spec, /*load_initial=*/false).status().code(), absl::StatusCode::kNotFound);
  v1::JobSpec compressed = spec;
  compressed.mutable_compression()->set_parameters(v1::COMPRESSION_INT8);
  ExpectInvalidField(preparer.Prepare(compressed, /*load_initial=*/false), "spec.trainable",
                     "not with compression.parameters");
  ExpectInvalidField(preparer.Prepare(LocalStepsSpec(spec), /*load_initial=*/false), "spec.trainable",
                     "not with local_steps");
}

TEST_F(JobPreparerTest, ATimeBudgetNeedsLocalStepsAndAPositiveValue) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  v1::JobSpec synchronous = Spec(256, 16);
  synchronous.set_round_time_budget_seconds(30);
  ExpectInvalidField(preparer.Prepare(synchronous, /*load_initial=*/false), "spec.round_time_budget_seconds",
                     "only with local_steps");
  v1::JobSpec local = LocalStepsSpec(Spec(256, 16));
  local.set_round_time_budget_seconds(-1);
  ExpectInvalidField(preparer.Prepare(local, /*load_initial=*/false), "spec.round_time_budget_seconds",
                     "must be a positive number of seconds, got -1");
  local.set_round_time_budget_seconds(30);
  EXPECT_EQ(preparer.Prepare(local, /*load_initial=*/false).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobPreparerTest, NeedsSomeDataUploadedOrOnWorkers) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  v1::JobSpec spec = Spec(256, 16);
  spec.clear_dataset_ids();
  ExpectInvalidField(preparer.Prepare(spec, /*load_initial=*/false), "spec.dataset_ids",
                     "at least one dataset is required (dataset_ids, or local_datasets on workers)");
}

TEST_F(JobPreparerTest, CompressedPseudoGradientsNeedLocalSteps) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  for (const v1::Compression compression :
       {v1::COMPRESSION_INT8, v1::COMPRESSION_FLOAT16, v1::COMPRESSION_BFLOAT16}) {
    v1::JobSpec synchronous = Spec(256, 16);
    synchronous.mutable_compression()->set_pseudo_gradients(compression);
    ExpectInvalidField(preparer.Prepare(synchronous, /*load_initial=*/false),
                       "spec.compression.pseudo_gradients", "only with local_steps");
  }
  // Exact pseudo-gradients (said outright, or unset) are fine without local steps: the next check
  // (the unknown dataset) answers.
  for (const v1::Compression compression : {v1::COMPRESSION_NONE, v1::COMPRESSION_UNSPECIFIED}) {
    v1::JobSpec synchronous = Spec(256, 16);
    synchronous.mutable_compression()->set_pseudo_gradients(compression);
    EXPECT_EQ(preparer.Prepare(synchronous, /*load_initial=*/false).status().code(),
              absl::StatusCode::kNotFound)
        << v1::Compression_Name(compression);
  }
}

TEST_F(JobPreparerTest, CompressedParametersNeedNoLocalSteps) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  v1::JobSpec synchronous = Spec(256, 16);
  synchronous.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_NONE);
  synchronous.mutable_compression()->set_parameters(v1::COMPRESSION_INT8);
  // Valid: the next check (the unknown dataset) answers.
  const absl::StatusOr<PreparedJob> prepared = preparer.Prepare(synchronous, /*load_initial=*/false);
  EXPECT_EQ(prepared.status().code(), absl::StatusCode::kNotFound) << prepared.status();
}

TEST_F(JobPreparerTest, CompressesBothWithLocalSteps) {
  JobPreparer preparer(store_.get(), nullptr, 0.1, /*max_model_bytes=*/int64_t{1} << 30);
  for (const v1::Compression compression :
       {v1::COMPRESSION_INT8, v1::COMPRESSION_FLOAT16, v1::COMPRESSION_BFLOAT16}) {
    v1::JobSpec spec = LocalStepsSpec(Spec(256, 16));
    spec.mutable_compression()->set_pseudo_gradients(compression);
    spec.mutable_compression()->set_parameters(compression);
    // Valid: the next check (the unknown dataset) answers.
    const absl::StatusOr<PreparedJob> prepared = preparer.Prepare(spec, /*load_initial=*/false);
    EXPECT_EQ(prepared.status().code(), absl::StatusCode::kNotFound)
        << v1::Compression_Name(compression) << ": " << prepared.status();
  }
}

}  // namespace
}  // namespace slimfit::server
