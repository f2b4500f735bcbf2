// LocalStepsTrainer with the real gradient engine on a tiny float64 model: the pseudo-gradient
// against inner steps taken by hand, the inner optimizer's state carried across rounds (in memory
// and through its file), Forget, a corrupt state file, unsafe job ids, empty steps and failed
// rounds. Compressed pseudo-gradients and their error feedback: local_steps_feedback_test.cc.
#include "worker/local_steps.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "performer/gradient_engine.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "worker/local_steps_test_support.h"

namespace slimfit::worker {
namespace {

using namespace local_steps_testing;  // NOLINT: the suites' shared fixtures
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The gradient of the mean loss over `batches` at `parameters`, computed independently of the
// per-sequence sum: the batches joined into one packed batch (a sequence start is a document start,
// so positions and prefix state restart there) and differentiated in one engine call.
performer::GradientResult MeanLossGradient(const std::vector<at::Tensor>& parameters,
                                           const std::vector<performer::PackedBatch>& batches) {
  performer::PackedBatch joined;
  for (const performer::PackedBatch& batch : batches) {
    const int64_t offset = joined.size();
    for (int64_t start : batch.doc_starts) joined.doc_starts.push_back(offset + start);
    joined.tokens.insert(joined.tokens.end(), batch.tokens.begin(), batch.tokens.end());
  }
  absl::StatusOr<performer::GradientResult> result =
      performer::ComputeGradient(ModelAt(parameters), joined, FullPlan(), performer::GradientOptions{});
  EXPECT_TRUE(result.ok()) << result.status();
  return *std::move(result);
}

TEST(LocalStepsTest, TwoSgdStepsGiveTheWeightedPseudoGradient) {
  const std::vector<performer::PackedBatch> sequences = Shard();
  const std::vector<int64_t> predicted = PredictedTokens(sequences);
  ASSERT_THAT(predicted, ElementsAre(5, 4, 3, 5));
  const performer::PerformerModel start = Model(7);
  constexpr double kRate = 0.5;

  LocalStepsTrainer trainer("");
  absl::StatusOr<LocalStepsResult> result =
      trainer.Run(kJob, start, Steps({2, 2}, Sgd(kRate)), predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(result.ok()) << result.status();

  // By hand: θ1 = θ0 − η g(θ0; sequences 0–1), θ2 = θ1 − η g(θ1; sequences 2–3).
  const std::vector<at::Tensor> theta0 = Clone(start.parameters());
  const performer::GradientResult first = MeanLossGradient(theta0, {sequences[0], sequences[1]});
  ASSERT_EQ(first.token_count, 9);
  std::vector<at::Tensor> theta1;
  for (size_t i = 0; i < theta0.size(); ++i) theta1.push_back(theta0[i] - kRate * first.gradients[i]);
  const performer::GradientResult second = MeanLossGradient(theta1, {sequences[2], sequences[3]});
  ASSERT_EQ(second.token_count, 8);
  const double weight = 17.0 / kNormalizer;
  std::vector<at::Tensor> want;
  for (size_t i = 0; i < theta0.size(); ++i) {
    const at::Tensor theta2 = theta1[i] - kRate * second.gradients[i];
    want.push_back(weight * (theta0[i] - theta2));
  }

  ASSERT_EQ(result->sum.gradient.size(), start.parameters().size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(result->sum.gradient[i].scalar_type(), at::kDouble) << start.names()[i];
    EXPECT_TRUE(result->sum.gradient[i].sizes().equals(start.parameters()[i].sizes())) << start.names()[i];
  }
  EXPECT_LT(MaxAbsDifference(result->sum.gradient, want), 1e-10);
  EXPECT_GT(MaxAbs(want), 1e-4);  // the steps moved the parameters: the comparison means something
  EXPECT_NEAR(result->sum.loss_sum, first.loss_sum + second.loss_sum, 1e-10);
  EXPECT_EQ(result->sum.token_count, 17);
  EXPECT_GT(result->sum.slice_forwards, 0);
  EXPECT_EQ(result->steps, 2);
  EXPECT_EQ(result->inner_steps_total, 2);
  // The round's parameters are the caller's: untouched.
  EXPECT_EQ(MaxAbsDifference(start.parameters(), theta0), 0);
  EXPECT_THAT(trainer.Jobs(), ElementsAre(kJob));

  // The next round counts on from this worker's inner steps.
  absl::StatusOr<LocalStepsResult> again =
      trainer.Run(kJob, start, Steps({1, 3}, Sgd(kRate)), predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->steps, 2);
  EXPECT_EQ(again->inner_steps_total, 4);
}

TEST(LocalStepsTest, AnExpiredTimeBudgetStopsAfterTheFirstStepAndWeightsByItsTokens) {
  const std::vector<performer::PackedBatch> sequences = Shard();
  const std::vector<int64_t> predicted = PredictedTokens(sequences);
  const performer::PerformerModel start = Model(7);
  constexpr double kRate = 0.5;
  LocalStepsTrainer trainer("");
  // The deadline is already past: the first step runs, the second does not.
  absl::StatusOr<LocalStepsResult> result =
      trainer.Run(kJob, start, Steps({2, 2}, Sgd(kRate)), predicted, kNormalizer, Engine(&sequences),
                  absl::Now() - absl::Seconds(1));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 1);
  EXPECT_EQ(result->sum.token_count, 9);
  const std::vector<at::Tensor> theta0 = Clone(start.parameters());
  const performer::GradientResult first = MeanLossGradient(theta0, {sequences[0], sequences[1]});
  std::vector<at::Tensor> want;
  for (size_t i = 0; i < theta0.size(); ++i) want.push_back((9.0 / kNormalizer) * kRate * first.gradients[i]);
  EXPECT_LT(MaxAbsDifference(result->sum.gradient, want), 1e-10);
  EXPECT_GT(MaxAbs(want), 1e-6);

  // With time to spare, every step runs.
  absl::StatusOr<LocalStepsResult> all =
      trainer.Run(kJob, start, Steps({2, 2}, Sgd(kRate)), predicted, kNormalizer, Engine(&sequences),
                  absl::Now() + absl::Hours(1));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->steps, 2);
  EXPECT_EQ(all->sum.token_count, 17);
}

// Round 1 by one trainer, round 2 by a new one on the same directory (a restarted worker): the same
// as one trainer that ran both rounds in memory.
TEST(LocalStepsTest, AResumedWorkerContinuesTheInnerOptimizer) {
  const std::vector<performer::PackedBatch> sequences = Shard();
  const std::vector<int64_t> predicted = PredictedTokens(sequences);
  const performer::PerformerModel round1 = Model(1);
  const performer::PerformerModel round2 = Model(2);
  const v1::LocalSteps local = Steps({2, 2}, AdamW());
  const std::string dir = testing_util::TempPath("resumed");

  LocalStepsTrainer in_memory("");
  ASSERT_TRUE(in_memory.Run(kJob, round1, local, predicted, kNormalizer, Engine(&sequences)).ok());
  absl::StatusOr<LocalStepsResult> want =
      in_memory.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(want->inner_steps_total, 4);

  {
    LocalStepsTrainer before_restart(dir);
    absl::StatusOr<LocalStepsResult> first =
        before_restart.Run(kJob, round1, local, predicted, kNormalizer, Engine(&sequences));
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->inner_steps_total, 2);
    EXPECT_TRUE(std::filesystem::exists(StateFile(dir)));
  }
  LocalStepsTrainer after_restart(dir);
  // Held on disk before the restarted worker touches it: its heartbeats report the job.
  EXPECT_THAT(after_restart.Jobs(), ElementsAre(kJob));
  absl::StatusOr<LocalStepsResult> got =
      after_restart.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->inner_steps_total, 4);
  EXPECT_EQ(got->steps, 2);
  EXPECT_LT(MaxAbsDifference(got->sum.gradient, want->sum.gradient), 1e-13);
  EXPECT_NEAR(got->sum.loss_sum, want->sum.loss_sum, 1e-12);

  // Not vacuous: without round 1's moments and step count, round 2 comes out otherwise.
  LocalStepsTrainer fresh("");
  absl::StatusOr<LocalStepsResult> afresh =
      fresh.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(afresh.ok()) << afresh.status();
  EXPECT_EQ(afresh->inner_steps_total, 2);
  EXPECT_GT(MaxAbsDifference(afresh->sum.gradient, want->sum.gradient), 1e-6);
}

TEST(LocalStepsTest, ForgetDropsTheStateInMemoryAndOnDisk) {
  const std::vector<performer::PackedBatch> sequences = Shard();
  const std::vector<int64_t> predicted = PredictedTokens(sequences);
  const performer::PerformerModel round1 = Model(1);
  const performer::PerformerModel round2 = Model(2);
  const v1::LocalSteps local = Steps({2, 2}, AdamW());
  const std::string dir = testing_util::TempPath("forget");

  LocalStepsTrainer trainer(dir);
  ASSERT_TRUE(trainer.Run(kJob, round1, local, predicted, kNormalizer, Engine(&sequences)).ok());
  ASSERT_TRUE(std::filesystem::exists(StateFile(dir)));
  EXPECT_THAT(trainer.Jobs(), ElementsAre(kJob));

  trainer.Forget(kJob);
  EXPECT_FALSE(std::filesystem::exists(StateFile(dir)));
  EXPECT_THAT(trainer.Jobs(), IsEmpty());
  trainer.Forget(kJob);  // idempotent
  EXPECT_THAT(trainer.Jobs(), IsEmpty());

  // The job's next round starts afresh.
  absl::StatusOr<LocalStepsResult> got =
      trainer.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->inner_steps_total, 2);
  LocalStepsTrainer fresh("");
  absl::StatusOr<LocalStepsResult> want =
      fresh.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_LT(MaxAbsDifference(got->sum.gradient, want->sum.gradient), 1e-13);
}

TEST(LocalStepsTest, AnUnreadableStateFileStartsTheInnerOptimizerAfresh) {
  const std::vector<performer::PackedBatch> sequences = Shard();
  const std::vector<int64_t> predicted = PredictedTokens(sequences);
  const performer::PerformerModel round1 = Model(1);
  const performer::PerformerModel round2 = Model(2);
  const v1::LocalSteps local = Steps({2, 2}, AdamW());
  LocalStepsTrainer fresh("");
  absl::StatusOr<LocalStepsResult> want =
      fresh.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(want.ok()) << want.status();

  // Garbage in place of the file.
  const std::string corrupt_dir = testing_util::TempPath("corrupt");
  {
    LocalStepsTrainer before_restart(corrupt_dir);
    ASSERT_TRUE(before_restart.Run(kJob, round1, local, predicted, kNormalizer, Engine(&sequences)).ok());
  }
  {
    std::ofstream out(StateFile(corrupt_dir), std::ios::binary | std::ios::trunc);
    out << "garbage: not a safetensors file";
  }
  LocalStepsTrainer after_corruption(corrupt_dir);
  absl::StatusOr<LocalStepsResult> got =
      after_corruption.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->inner_steps_total, 2);
  EXPECT_LT(MaxAbsDifference(got->sum.gradient, want->sum.gradient), 1e-13);

  // Another optimizer's state (SGD with momentum where the job's inner optimizer is AdamW).
  const std::string other_dir = testing_util::TempPath("other_kind");
  v1::Optimizer momentum = Sgd(0.1);
  momentum.mutable_sgd()->set_momentum(0.9);
  {
    LocalStepsTrainer before_restart(other_dir);
    ASSERT_TRUE(
        before_restart.Run(kJob, round1, Steps({2, 2}, momentum), predicted, kNormalizer, Engine(&sequences))
            .ok());
  }
  LocalStepsTrainer after_change(other_dir);
  got = after_change.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->inner_steps_total, 2);
  EXPECT_LT(MaxAbsDifference(got->sum.gradient, want->sum.gradient), 1e-13);
}

TEST(LocalStepsTest, AJobIdThatIsNoSafeFileNameIsRefusedWithADirectory) {
  const std::vector<performer::PackedBatch> sequences = Shard();
  const std::vector<int64_t> predicted = PredictedTokens(sequences);
  const performer::PerformerModel start = Model(1);
  const std::string dir = testing_util::TempPath("unsafe");
  LocalStepsTrainer trainer(dir);
  for (const std::string job : {"../x", "a/b", ".hidden", ""}) {
    int calls = 0;
    absl::StatusOr<LocalStepsResult> result =
        trainer.Run(job, start, Steps({4}, Sgd(0.1)), predicted, kNormalizer, Engine(&sequences, &calls));
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << job;
    EXPECT_THAT(result.status().message(), HasSubstr("job_id")) << job;
    EXPECT_EQ(calls, 0) << job;
  }
  EXPECT_FALSE(std::filesystem::exists(testing_util::TempPath("x.safetensors")));
  EXPECT_THAT(trainer.Jobs(), IsEmpty());

  // In memory any id will do: it names no file.
  LocalStepsTrainer in_memory("");
  EXPECT_TRUE(
      in_memory.Run("../x", start, Steps({4}, Sgd(0.1)), predicted, kNormalizer, Engine(&sequences)).ok());
}

TEST(LocalStepsTest, StepsOverNoPredictedTokensAreSkipped) {
  // The second sequence's documents are all one token long: it predicts nothing.
  const std::vector<performer::PackedBatch> with_empty = {Sequence(6, 1), Sequence(3, 5, {0, 1, 2}),
                                                          Sequence(6, 4)};
  const std::vector<int64_t> predicted = PredictedTokens(with_empty);
  ASSERT_THAT(predicted, ElementsAre(5, 0, 5));
  const std::vector<performer::PackedBatch> without = {with_empty[0], with_empty[2]};
  const performer::PerformerModel start = Model(3);
  const v1::Optimizer inner = AdamW();

  LocalStepsTrainer trainer("");
  int calls = 0;
  // Steps 2 (the empty sequence) and 3 (no sequence at all) are skipped.
  absl::StatusOr<LocalStepsResult> got = trainer.Run(kJob, start, Steps({1, 1, 0, 1}, inner), predicted,
                                                     kNormalizer, Engine(&with_empty, &calls));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->steps, 2);
  EXPECT_EQ(got->inner_steps_total, 2);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(got->sum.token_count, 10);

  LocalStepsTrainer reference("");
  absl::StatusOr<LocalStepsResult> want = reference.Run(
      kJob, start, Steps({1, 1}, inner), PredictedTokens(without), kNormalizer, Engine(&without));
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_LT(MaxAbsDifference(got->sum.gradient, want->sum.gradient), 1e-14);
  EXPECT_NEAR(got->sum.loss_sum, want->sum.loss_sum, 1e-12);

  // A shard that predicts nothing at all: no step, a zero pseudo-gradient.
  const std::vector<performer::PackedBatch> empty = {Sequence(1, 1), Sequence(2, 2, {0, 1})};
  absl::StatusOr<LocalStepsResult> nothing = trainer.Run("job-000002", start, Steps({1, 1}, inner),
                                                         PredictedTokens(empty), kNormalizer, Engine(&empty));
  ASSERT_TRUE(nothing.ok()) << nothing.status();
  EXPECT_EQ(nothing->steps, 0);
  EXPECT_EQ(nothing->inner_steps_total, 0);
  EXPECT_EQ(nothing->sum.token_count, 0);
  ASSERT_EQ(nothing->sum.gradient.size(), start.parameters().size());
  EXPECT_EQ(MaxAbs(nothing->sum.gradient), 0);
}

// A round that fails part-way leaves no trace: the job's next round starts from the state saved
// after the last finished round.
TEST(LocalStepsTest, AFailedRoundLeavesTheLastFinishedRoundsState) {
  const std::vector<performer::PackedBatch> sequences = Shard();
  const std::vector<int64_t> predicted = PredictedTokens(sequences);
  const performer::PerformerModel round1 = Model(1);
  const performer::PerformerModel round2 = Model(2);
  const v1::LocalSteps local = Steps({1, 1, 2}, AdamW());

  LocalStepsTrainer never_failed("");
  ASSERT_TRUE(never_failed.Run(kJob, round1, local, predicted, kNormalizer, Engine(&sequences)).ok());
  absl::StatusOr<LocalStepsResult> want =
      never_failed.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(want->inner_steps_total, 6);

  LocalStepsTrainer trainer(testing_util::TempPath("failed"));
  ASSERT_TRUE(trainer.Run(kJob, round1, local, predicted, kNormalizer, Engine(&sequences)).ok());
  // Round 2's third inner step fails, after two inner steps changed the optimizer.
  int calls = 0;
  const SumGradients engine = Engine(&sequences);
  const SumGradients cancelled_on_third = [&](const performer::PerformerModel& model, size_t begin,
                                              size_t end, int64_t normalizer) -> absl::StatusOr<SequenceSum> {
    if (++calls == 3) return absl::CancelledError("the caller cancelled");
    return engine(model, begin, end, normalizer);
  };
  absl::StatusOr<LocalStepsResult> failed =
      trainer.Run(kJob, round2, local, predicted, kNormalizer, cancelled_on_third);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(failed.status().message(), "the caller cancelled");
  EXPECT_EQ(calls, 3);

  absl::StatusOr<LocalStepsResult> retried =
      trainer.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->inner_steps_total, 6);
  EXPECT_EQ(retried->steps, 3);
  EXPECT_LT(MaxAbsDifference(retried->sum.gradient, want->sum.gradient), 1e-13);
  EXPECT_NEAR(retried->sum.loss_sum, want->sum.loss_sum, 1e-12);
}

// Without a directory there is no saved state to go back to: the documented fallback is afresh.
TEST(LocalStepsTest, InMemoryAFailedRoundStartsTheInnerOptimizerAfresh) {
  const std::vector<performer::PackedBatch> sequences = Shard();
  const std::vector<int64_t> predicted = PredictedTokens(sequences);
  const performer::PerformerModel round1 = Model(1);
  const performer::PerformerModel round2 = Model(2);
  const v1::LocalSteps local = Steps({2, 2}, AdamW());

  LocalStepsTrainer trainer("");
  ASSERT_TRUE(trainer.Run(kJob, round1, local, predicted, kNormalizer, Engine(&sequences)).ok());
  EXPECT_EQ(trainer.Run(kJob, round2, local, predicted, kNormalizer, OutOfMemory()).status().code(),
            absl::StatusCode::kResourceExhausted);
  absl::StatusOr<LocalStepsResult> got =
      trainer.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->inner_steps_total, 2);
  LocalStepsTrainer fresh("");
  absl::StatusOr<LocalStepsResult> want =
      fresh.Run(kJob, round2, local, predicted, kNormalizer, Engine(&sequences));
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_LT(MaxAbsDifference(got->sum.gradient, want->sum.gradient), 1e-13);
}

}  // namespace
}  // namespace slimfit::worker
