#include "server/job_preparer.h"

#include <memory>

#include "absl/status/status.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/rpc_util.h"

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
  EXPECT_EQ(preparer.Prepare(spec, /*load_initial=*/false).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace slimfit::server
