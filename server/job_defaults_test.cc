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

TEST(JobDefaultsTest, LocalStepsGetDiLoCosOuterOptimizerAndNoSpotChecks) {
  v1::JobSpec given = FreshAdamWJob(30);
  given.set_local_steps(20);
  const v1::JobSpec spec = WithJobDefaults(given);
  const v1::Optimizer& outer = spec.outer_optimizer();
  ASSERT_TRUE(outer.has_sgd());
  EXPECT_DOUBLE_EQ(outer.sgd().momentum(), kDefaultOuterMomentum);
  EXPECT_DOUBLE_EQ(outer.sgd().momentum(), 0.9);
  EXPECT_TRUE(outer.sgd().nesterov());
  EXPECT_DOUBLE_EQ(outer.learning_rate(), kDefaultOuterLearningRate);
  EXPECT_DOUBLE_EQ(outer.learning_rate(), 0.7);
  EXPECT_TRUE(outer.has_warmup_steps());
  EXPECT_EQ(outer.warmup_steps(), 0);
  EXPECT_FALSE(outer.has_gradient_clip_norm());
  EXPECT_TRUE(spec.has_verify_fraction());
  EXPECT_DOUBLE_EQ(spec.verify_fraction(), 0);
  // The inner optimizer warms up over a worker's inner steps: 30 rounds · 20 steps / 10 = 60.
  EXPECT_EQ(spec.optimizer().warmup_steps(), 60);
  EXPECT_DOUBLE_EQ(spec.optimizer().learning_rate(), kDefaultAdamWLearningRate);
  EXPECT_EQ(spec.quarantine_after(), kDefaultQuarantineAfter);
}

TEST(JobDefaultsTest, LocalStepsWarmUpIsBoundedByOneAndAHundred) {
  v1::JobSpec many = FreshAdamWJob(300);
  many.set_local_steps(50);  // 15,000 inner steps
  EXPECT_EQ(WithJobDefaults(many).optimizer().warmup_steps(), 100);
  v1::JobSpec few = FreshAdamWJob(2);
  few.set_local_steps(4);  // 8 inner steps
  EXPECT_EQ(WithJobDefaults(few).optimizer().warmup_steps(), 1);
  v1::JobSpec one = FreshAdamWJob(9);
  one.set_local_steps(1);  // as many inner steps as rounds
  EXPECT_EQ(WithJobDefaults(one).optimizer().warmup_steps(), 1);
  v1::JobSpec some = FreshAdamWJob(9);
  some.set_local_steps(5);  // 45 inner steps
  EXPECT_EQ(WithJobDefaults(some).optimizer().warmup_steps(), 4);
  // Without local steps the same job warms up over its rounds.
  EXPECT_EQ(WithJobDefaults(FreshAdamWJob(9)).optimizer().warmup_steps(), 1);
  // And a synchronous job gets no outer optimizer.
  EXPECT_FALSE(WithJobDefaults(FreshAdamWJob(9)).has_outer_optimizer());
}

TEST(JobDefaultsTest, LocalStepsKeepTheOuterOptimizerAndVerificationTheSpecGives) {
  // Plain SGD at learning rate 1 (the workers' average applied as it is): momentum 0 said outright.
  v1::JobSpec given = FreshAdamWJob(30);
  given.set_local_steps(8);
  given.mutable_outer_optimizer()->mutable_sgd()->set_momentum(0);
  given.mutable_outer_optimizer()->set_learning_rate(1.0);
  given.mutable_outer_optimizer()->set_warmup_steps(5);
  given.set_verify_fraction(0.2);  // refused later by the preparer, but kept here
  v1::JobSpec spec = WithJobDefaults(given);
  ASSERT_TRUE(spec.outer_optimizer().has_sgd());
  EXPECT_DOUBLE_EQ(spec.outer_optimizer().sgd().momentum(), 0);
  EXPECT_FALSE(spec.outer_optimizer().sgd().nesterov());
  EXPECT_DOUBLE_EQ(spec.outer_optimizer().learning_rate(), 1.0);
  EXPECT_EQ(spec.outer_optimizer().warmup_steps(), 5);
  EXPECT_DOUBLE_EQ(spec.verify_fraction(), 0.2);

  // SGD with only a learning rate: the rest of DiLoCo's SGD filled in.
  given.mutable_outer_optimizer()->Clear();
  given.mutable_outer_optimizer()->mutable_sgd();
  given.mutable_outer_optimizer()->set_learning_rate(0.3);
  spec = WithJobDefaults(given);
  ASSERT_TRUE(spec.outer_optimizer().has_sgd());
  EXPECT_DOUBLE_EQ(spec.outer_optimizer().sgd().momentum(), kDefaultOuterMomentum);
  EXPECT_TRUE(spec.outer_optimizer().sgd().nesterov());
  EXPECT_DOUBLE_EQ(spec.outer_optimizer().learning_rate(), 0.3);
  EXPECT_EQ(spec.outer_optimizer().warmup_steps(), 0);

  // Momentum without Nesterov, said outright, stays so.
  given.mutable_outer_optimizer()->mutable_sgd()->set_momentum(0.5);
  given.mutable_outer_optimizer()->mutable_sgd()->set_nesterov(false);
  spec = WithJobDefaults(given);
  EXPECT_DOUBLE_EQ(spec.outer_optimizer().sgd().momentum(), 0.5);
  EXPECT_FALSE(spec.outer_optimizer().sgd().nesterov());

  // An AdamW outer optimizer without a rate gets AdamW's, and no warm-up.
  given.mutable_outer_optimizer()->Clear();
  given.mutable_outer_optimizer()->mutable_adamw()->set_beta1(0.95);
  spec = WithJobDefaults(given);
  ASSERT_TRUE(spec.outer_optimizer().has_adamw());
  EXPECT_DOUBLE_EQ(spec.outer_optimizer().adamw().beta1(), 0.95);
  EXPECT_DOUBLE_EQ(spec.outer_optimizer().learning_rate(), kDefaultAdamWLearningRate);
  EXPECT_EQ(spec.outer_optimizer().warmup_steps(), 0);

  // Only a learning rate: DiLoCo's SGD at that rate.
  given.mutable_outer_optimizer()->Clear();
  given.mutable_outer_optimizer()->set_learning_rate(0.5);
  spec = WithJobDefaults(given);
  ASSERT_TRUE(spec.outer_optimizer().has_sgd());
  EXPECT_DOUBLE_EQ(spec.outer_optimizer().sgd().momentum(), kDefaultOuterMomentum);
  EXPECT_TRUE(spec.outer_optimizer().sgd().nesterov());
  EXPECT_DOUBLE_EQ(spec.outer_optimizer().learning_rate(), 0.5);
}

TEST(JobDefaultsTest, CompressionDefaultsToExactUpdates) {
  v1::JobSpec given = FreshAdamWJob(30);
  given.set_local_steps(8);
  ASSERT_FALSE(given.has_compression());
  const v1::JobSpec spec = WithJobDefaults(given);
  ASSERT_TRUE(spec.has_compression());
  EXPECT_EQ(spec.compression().pseudo_gradients(), v1::COMPRESSION_NONE);
  EXPECT_EQ(spec.compression().parameters(), v1::COMPRESSION_NONE);
  // A synchronous job too.
  const v1::JobSpec synchronous = WithJobDefaults(FreshAdamWJob(30));
  EXPECT_EQ(synchronous.compression().pseudo_gradients(), v1::COMPRESSION_NONE);
  EXPECT_EQ(synchronous.compression().parameters(), v1::COMPRESSION_NONE);
  // An empty compression message is filled in the same way.
  given.mutable_compression();
  EXPECT_EQ(WithJobDefaults(given).compression().pseudo_gradients(), v1::COMPRESSION_NONE);
  EXPECT_EQ(WithJobDefaults(given).compression().parameters(), v1::COMPRESSION_NONE);
}

TEST(JobDefaultsTest, KeepsTheCompressionTheSpecGives) {
  v1::JobSpec given = FreshAdamWJob(30);
  given.set_local_steps(8);
  given.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_INT8);
  given.mutable_compression()->set_parameters(v1::COMPRESSION_BFLOAT16);
  v1::JobSpec spec = WithJobDefaults(given);
  EXPECT_EQ(spec.compression().pseudo_gradients(), v1::COMPRESSION_INT8);
  EXPECT_EQ(spec.compression().parameters(), v1::COMPRESSION_BFLOAT16);

  // One field given: only the other is defaulted.
  given.mutable_compression()->clear_pseudo_gradients();
  given.mutable_compression()->set_parameters(v1::COMPRESSION_FLOAT16);
  spec = WithJobDefaults(given);
  EXPECT_EQ(spec.compression().pseudo_gradients(), v1::COMPRESSION_NONE);
  EXPECT_EQ(spec.compression().parameters(), v1::COMPRESSION_FLOAT16);

  // NONE said outright stays NONE; an unknown value is left for the preparer to refuse.
  given.mutable_compression()->set_pseudo_gradients(v1::COMPRESSION_NONE);
  given.mutable_compression()->set_parameters(static_cast<v1::Compression>(99));
  spec = WithJobDefaults(given);
  EXPECT_EQ(spec.compression().pseudo_gradients(), v1::COMPRESSION_NONE);
  EXPECT_EQ(static_cast<int>(spec.compression().parameters()), 99);
}

}  // namespace
}  // namespace slimfit::server
