// JobRunner's held-out evaluation (JobSpec.held_out_fraction, eval_interval_rounds): an
// Evaluation event before round 1, after every K-th round and after the last (once when the last
// round is a multiple of K), each with the mean loss per predicted token of the held-out sequences
// (JobData::HeldOutSequences) at the parameters of that round — checked against the engine run
// here on those sequences at the parameters the runner checkpointed for that round — and the
// job's progress carrying the last one.
//
// In-process: two TestWorkerServices (real engine losses over gRPC in-process channels). No test
// sleeps.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/job_runner_test_fixture.h"

namespace slimfit::server {
namespace {

class JobRunnerEvaluationTest : public JobRunnerFixture {
 protected:
  // The engine's mean loss per predicted token over the held-out sequences at `parameters`, and
  // the tokens it is over.
  struct Loss {
    double loss = 0;
    int64_t tokens = 0;
  };
  Loss HeldOutLoss(const std::vector<at::Tensor>& parameters) {
    const JobData data = *Data();
    const performer::PerformerModel model = ModelAt(parameters);
    const std::vector<SequenceRef> sequences = data.HeldOutSequences();
    performer::GradientOptions options;
    options.loss_normalizer = data.PredictedTokens(sequences);
    options.feature_seed = job_.spec().seed();
    double loss_sum = 0;
    Loss loss;
    for (const SequenceRef& sequence : sequences) {
      performer::PackedBatch batch;
      data.Gather({sequence}, &batch.tokens, &batch.doc_starts);
      if (performer::PredictedTokenCount(batch) == 0) continue;
      absl::StatusOr<performer::GradientResult> result =
          performer::ComputeGradient(model, batch, performer::Plan(), options);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return loss;
      loss_sum += result->loss_sum;
      loss.tokens += result->token_count;
    }
    loss.loss = loss_sum / static_cast<double>(loss.tokens);
    return loss;
  }
};

TEST_F(JobRunnerEvaluationTest, EvaluatesTheHeldOutSequencesBeforeRoundOneEveryKRoundsAndAfterTheLast) {
  v1::JobSpec& spec = *job_.mutable_spec();
  spec.set_rounds(5);
  spec.set_held_out_fraction(0.25);
  spec.set_eval_interval_rounds(2);
  spec.set_checkpoint_interval_rounds(1);  // the parameters of every round, to evaluate here
  ASSERT_TRUE(store_->PutJob(job_).ok());
  const JobData data = *Data();
  ASSERT_EQ(data.held_out_sequences(), 16);  // the last quarter of the 64 whole sequences
  AddWorker();
  AddWorker();
  ASSERT_TRUE(NewRunner().ok());
  runner_->Start();
  ASSERT_TRUE(runner_->AwaitTerminal(absl::Now() + kSafety));
  runner_->Stop();
  const v1::Job job = runner_->Snapshot();
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.state_reason();

  std::vector<v1::Evaluation> evaluations;
  std::vector<int64_t> order;  // rounds of RoundCompleted (r) and Evaluation (-1 - r) events
  for (const v1::JobEvent& event : Events()) {
    if (event.has_evaluation()) {
      evaluations.push_back(event.evaluation());
      order.push_back(-1 - event.evaluation().round());
    }
    if (event.has_round_completed()) order.push_back(event.round_completed().round());
  }
  // Before round 1, after rounds 2 and 4 (K = 2) and after the last, 5; each after its round.
  EXPECT_EQ(order, (std::vector<int64_t>{-1, 1, 2, -3, 3, 4, -5, 5, -6}));
  ASSERT_EQ(evaluations.size(), 4u);

  // Float32 sums of a few hundred per-token losses in a different order (per worker, then summed)
  // than here: they agree to about 1e-6 relative; 1e-5 leaves room and is far below what one
  // round's step (learning rate 0.5) or other sequences change.
  constexpr double kRelativeTolerance = 1e-5;
  double previous = 0;
  for (const v1::Evaluation& evaluation : evaluations) {
    absl::StatusOr<std::vector<at::Tensor>> parameters = CheckpointParameters(evaluation.round());
    ASSERT_TRUE(parameters.ok()) << parameters.status();
    const Loss expected = HeldOutLoss(*parameters);
    EXPECT_EQ(evaluation.tokens(), expected.tokens) << "round " << evaluation.round();
    EXPECT_EQ(evaluation.tokens(), data.PredictedTokens(data.HeldOutSequences()));
    EXPECT_NEAR(evaluation.loss(), expected.loss, kRelativeTolerance * expected.loss)
        << "round " << evaluation.round();
    EXPECT_NEAR(evaluation.bits_per_byte(), evaluation.loss() / std::log(2.0), 1e-12);
    // Each evaluation is of its own round's parameters: training moves the loss.
    EXPECT_NE(evaluation.loss(), previous);
    previous = evaluation.loss();
  }
  EXPECT_EQ(job.progress().eval_round(), 5);
  EXPECT_DOUBLE_EQ(job.progress().eval_loss(), evaluations.back().loss());
}

}  // namespace
}  // namespace slimfit::server
