#include "server/job_defaults.h"

#include <gtest/gtest.h>

#include "performer/performer_model.h"

namespace slimfit::server {
namespace {

v1::JobSpec FreshAdamWJob(int64_t rounds) {
  v1::JobSpec spec;
  spec.set_rounds(rounds);
  spec.mutable_model()->mutable_config()->set_d_model(32);
  spec.mutable_optimizer()->mutable_adamw();
  return spec;
}

TEST(JobDefaultsTest, FillsWhatTheSpecLeavesOut) {
  const v1::JobSpec spec = WithJobDefaults(FreshAdamWJob(300));
  EXPECT_DOUBLE_EQ(spec.model().init_readout_scale(), performer::kTrainingReadoutScale);
  EXPECT_DOUBLE_EQ(spec.optimizer().learning_rate(), kDefaultAdamWLearningRate);
  EXPECT_EQ(spec.optimizer().warmup_steps(), 30);
  EXPECT_DOUBLE_EQ(spec.verify_fraction(), kDefaultVerifyFraction);
  EXPECT_EQ(spec.quarantine_after(), kDefaultQuarantineAfter);
  EXPECT_EQ(WithJobDefaults(FreshAdamWJob(5000)).optimizer().warmup_steps(), 100);
  EXPECT_EQ(WithJobDefaults(FreshAdamWJob(3)).optimizer().warmup_steps(), 1);
}

TEST(JobDefaultsTest, KeepsWhatTheSpecSays) {
  v1::JobSpec given = FreshAdamWJob(300);
  given.mutable_model()->set_init_readout_scale(1.0);
  given.mutable_optimizer()->set_learning_rate(1e-3);
  given.mutable_optimizer()->set_warmup_steps(0);
  given.set_verify_fraction(0);
  given.set_quarantine_after(7);
  const v1::JobSpec spec = WithJobDefaults(given);
  EXPECT_DOUBLE_EQ(spec.model().init_readout_scale(), 1.0);
  EXPECT_DOUBLE_EQ(spec.optimizer().learning_rate(), 1e-3);
  EXPECT_EQ(spec.optimizer().warmup_steps(), 0);
  EXPECT_TRUE(spec.has_verify_fraction());
  EXPECT_DOUBLE_EQ(spec.verify_fraction(), 0);
  EXPECT_EQ(spec.quarantine_after(), 7);
}

TEST(JobDefaultsTest, AFineTunedCheckpointAndSgdGetNoFreshModelOrAdamWDefaults) {
  v1::JobSpec spec;
  spec.set_rounds(10);
  spec.mutable_model()->mutable_checkpoint()->set_job_id("job-1");
  spec.mutable_optimizer()->mutable_sgd();
  spec = WithJobDefaults(spec);
  EXPECT_FALSE(spec.model().has_init_readout_scale());
  EXPECT_FALSE(spec.optimizer().has_learning_rate());
}

}  // namespace
}  // namespace slimfit::server
