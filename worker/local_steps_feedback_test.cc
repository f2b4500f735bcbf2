// LocalStepsTrainer's compressed pseudo-gradients (LocalSteps.compression), with the real gradient
// engine on a tiny float64 model: what a round sends against an exact run's pseudo-gradient, and its
// error feedback carried across rounds (in memory and through its file), resumed by a restarted
// worker, restarted at zero by an unusable file, dropped by Forget and kept through a failed round;
// exact rounds keep none.
#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/safetensors.h"
#include "worker/local_steps.h"
#include "worker/local_steps_test_support.h"

namespace slimfit::worker {
namespace {

using namespace local_steps_testing;  // NOLINT: the suites' shared fixtures
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The feedback file in `dir` holds what the encoding of `exact` lost (exact − decoded), and that is
// worth carrying (well above float32 rounding).
void ExpectKeepsWhatItLost(const std::string& dir, const std::vector<at::Tensor>& exact,
                           const std::vector<at::Tensor>& decoded) {
  const std::vector<at::Tensor> feedback = ReadFeedback(dir);
  std::vector<at::Tensor> lost;
  for (size_t i = 0; i < decoded.size(); ++i) lost.push_back(exact[i].to(at::kFloat) - decoded[i]);
  EXPECT_LT(MaxAbsDifference(feedback, lost), FloatTolerance(exact));
  EXPECT_GT(MaxAbs(feedback), 100 * FloatTolerance(exact));
}

// Rounds over Shard() from Model(1) (round 1) and Model(2) (round 2); most tests run SGD in int8.
class LocalStepsCompressionTest : public ::testing::Test {
 protected:
  absl::StatusOr<LocalStepsResult> Round(LocalStepsTrainer& trainer, const performer::PerformerModel& start,
                                         const v1::LocalSteps& steps) const {
    return trainer.Run(kJob, start, steps, predicted_, kNormalizer, Engine(&sequences_));
  }

  // The round by a fresh trainer (in memory): what a round that carries nothing over gives.
  absl::StatusOr<LocalStepsResult> Fresh(const performer::PerformerModel& start,
                                         const v1::LocalSteps& steps) const {
    LocalStepsTrainer fresh("");
    return Round(fresh, start, steps);
  }

  // Sets exact2_ (round 2 of sgd_, exact, by a fresh trainer) and tolerance_ (float32 arithmetic
  // on its values). Call under ASSERT_NO_FATAL_FAILURE.
  void ExactSgdRound2() {
    absl::StatusOr<LocalStepsResult> exact2 = Fresh(round2_, sgd_);
    ASSERT_TRUE(exact2.ok()) << exact2.status();
    exact2_ = *std::move(exact2);
    tolerance_ = FloatTolerance(exact2_.sum.gradient);
  }

  // Round 1 of sgd_int8_ by `trainer` on `dir`, or (no trainer) by a worker on `dir` that then
  // stops. Sets feedback1_ from the file: what the round lost, which must be worth carrying.
  // REQUIRES: ExactSgdRound2() ran. Call under ASSERT_NO_FATAL_FAILURE.
  void Int8SgdRound1(const std::string& dir, LocalStepsTrainer* trainer = nullptr) {
    if (trainer == nullptr) {
      LocalStepsTrainer before_restart(dir);
      ASSERT_TRUE(Round(before_restart, round1_, sgd_int8_).ok());
    } else {
      ASSERT_TRUE(Round(*trainer, round1_, sgd_int8_).ok());
    }
    feedback1_ = ReadFeedback(dir);
    ASSERT_GT(MaxAbs(feedback1_), 100 * tolerance_);
  }

  // `got`, an int8 round from round2_ by a trainer on `dir`, sends its encoding, which is of
  // `carried` (within int8's bound), and keeps exactly what that lost: decoded + feedback = carried.
  void ExpectEncodesAndKeeps(const LocalStepsResult& got, const std::string& dir,
                             const std::vector<at::Tensor>& carried, double tolerance) const {
    ExpectSendsItsEncoding(got, round2_, v1::COMPRESSION_INT8);
    ExpectWithinInt8Bound(got.encoded, carried);
    EXPECT_LT(MaxAbsDifference(Sum({Decoded(got.encoded), ReadFeedback(dir)}), carried), tolerance);
  }

  const std::vector<performer::PackedBatch> sequences_ = Shard();
  const std::vector<int64_t> predicted_ = PredictedTokens(sequences_);
  const performer::PerformerModel round1_ = Model(1);
  const performer::PerformerModel round2_ = Model(2);
  // SGD keeps the inner optimizer out of the feedback tests (no state shapes round 2).
  const v1::LocalSteps sgd_ = Steps({2, 2}, Sgd(0.5));
  const v1::LocalSteps sgd_int8_ = Compressed(sgd_, v1::COMPRESSION_INT8);
  LocalStepsResult exact2_;
  double tolerance_ = 0;
  std::vector<at::Tensor> feedback1_;
};

// The first compressed round: what it sends decodes to within the encoding's bound of the exact
// pseudo-gradient (an identical exact run's), and it keeps the exact value minus the decoded one.
TEST_F(LocalStepsCompressionTest, AnInt8RoundSendsItsEncodingAndKeepsWhatItLost) {
  const v1::LocalSteps exact_steps = Steps({2, 2}, AdamW());
  const std::string dir = testing_util::TempPath("int8_round");
  absl::StatusOr<LocalStepsResult> want = Fresh(round1_, exact_steps);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_GT(MaxAbs(want->sum.gradient), 1e-4);

  LocalStepsTrainer trainer(dir);
  absl::StatusOr<LocalStepsResult> got =
      Round(trainer, round1_, Compressed(exact_steps, v1::COMPRESSION_INT8));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSendsItsEncoding(*got, round1_, v1::COMPRESSION_INT8);
  ExpectWithinInt8Bound(got->encoded, want->sum.gradient);
  const std::vector<at::Tensor> decoded = Decoded(got->encoded);
  EXPECT_GT(MaxAbsDifference(decoded, want->sum.gradient), 0);  // lossy: the feedback means something
  // The rest of the round is as exact.
  EXPECT_NEAR(got->sum.loss_sum, want->sum.loss_sum, 1e-12);
  EXPECT_EQ(got->sum.token_count, want->sum.token_count);
  EXPECT_EQ(got->steps, 2);
  EXPECT_EQ(got->inner_steps_total, 2);

  // What the encoding lost, in the file beside the inner optimizer's state.
  ASSERT_TRUE(std::filesystem::exists(FeedbackFile(dir)));
  EXPECT_TRUE(std::filesystem::exists(StateFile(dir)));
  ExpectKeepsWhatItLost(dir, want->sum.gradient, decoded);
  // Heartbeats report the job once, not once per file.
  EXPECT_THAT(trainer.Jobs(), ElementsAre(kJob));
}

TEST_F(LocalStepsCompressionTest, ABfloat16RoundSendsItsEncodingAndKeepsWhatItLost) {
  const v1::LocalSteps exact_steps = Steps({1, 3}, Sgd(0.5));
  const std::string dir = testing_util::TempPath("bfloat16_round");
  absl::StatusOr<LocalStepsResult> want = Fresh(round2_, exact_steps);
  ASSERT_TRUE(want.ok()) << want.status();

  LocalStepsTrainer trainer(dir);
  absl::StatusOr<LocalStepsResult> got =
      Round(trainer, round2_, Compressed(exact_steps, v1::COMPRESSION_BFLOAT16));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSendsItsEncoding(*got, round2_, v1::COMPRESSION_BFLOAT16);
  const std::vector<at::Tensor> decoded = Decoded(got->encoded);
  for (size_t i = 0; i < decoded.size(); ++i) {
    const at::Tensor x = want->sum.gradient[i];
    // bfloat16: |x − x̂| ≤ 2⁻⁸|x| (and float32 rounding before it).
    const at::Tensor excess = (decoded[i].to(at::kDouble) - x).abs() - x.abs() * (std::ldexp(1.0, -8) + 1e-6);
    EXPECT_LE(excess.max().item<double>(), 0) << round2_.names()[i];
  }
  EXPECT_GT(MaxAbsDifference(decoded, want->sum.gradient), 0);
  ExpectKeepsWhatItLost(dir, want->sum.gradient, decoded);
}

// Round 2 encodes its pseudo-gradient plus what round 1 lost: nothing is lost for good, so the
// decoded rounds plus the feedback left are the exact rounds' sum.
TEST_F(LocalStepsCompressionTest, TheNextRoundEncodesItsPseudoGradientPlusTheFeedback) {
  const v1::LocalSteps exact_steps = Steps({2, 2}, AdamW());
  const v1::LocalSteps int8_steps = Compressed(exact_steps, v1::COMPRESSION_INT8);
  const std::string dir = testing_util::TempPath("two_rounds");

  LocalStepsTrainer exact("");
  absl::StatusOr<LocalStepsResult> exact1 = Round(exact, round1_, exact_steps);
  ASSERT_TRUE(exact1.ok()) << exact1.status();
  absl::StatusOr<LocalStepsResult> exact2 = Round(exact, round2_, exact_steps);
  ASSERT_TRUE(exact2.ok()) << exact2.status();

  LocalStepsTrainer trainer(dir);
  absl::StatusOr<LocalStepsResult> got1 = Round(trainer, round1_, int8_steps);
  ASSERT_TRUE(got1.ok()) << got1.status();
  const std::vector<at::Tensor> feedback1 = ReadFeedback(dir);
  absl::StatusOr<LocalStepsResult> got2 = Round(trainer, round2_, int8_steps);
  ASSERT_TRUE(got2.ok()) << got2.status();
  EXPECT_EQ(got2->inner_steps_total, 4);
  const std::vector<at::Tensor> exact_sum = Sum({exact1->sum.gradient, exact2->sum.gradient});
  const double tolerance = FloatTolerance(exact_sum);
  ASSERT_GT(MaxAbs(feedback1), 100 * tolerance);  // round 1 lost something worth carrying

  // Round 2's encoding is of exact2 + feedback1: within int8's bound of it, and the new feedback is
  // exactly what it lost.
  ExpectEncodesAndKeeps(*got2, dir, Sum({exact2->sum.gradient, feedback1}), tolerance);
  // Over both rounds: decoded1 + decoded2 + feedback2 = exact1 + exact2.
  EXPECT_LT(
      MaxAbsDifference(Sum({Decoded(got1->encoded), Decoded(got2->encoded), ReadFeedback(dir)}), exact_sum),
      tolerance);

  // In memory (no directory) the feedback carries over just the same.
  LocalStepsTrainer in_memory("");
  absl::StatusOr<LocalStepsResult> memory1 = Round(in_memory, round1_, int8_steps);
  ASSERT_TRUE(memory1.ok()) << memory1.status();
  absl::StatusOr<LocalStepsResult> memory2 = Round(in_memory, round2_, int8_steps);
  ASSERT_TRUE(memory2.ok()) << memory2.status();
  EXPECT_LT(MaxAbsDifference(memory1->sum.gradient, got1->sum.gradient), tolerance);
  EXPECT_LT(MaxAbsDifference(memory2->sum.gradient, got2->sum.gradient), tolerance);
}

// Round 1 by one trainer, round 2 by a new one on the same directory (a restarted worker): round 2
// still carries round 1's loss.
TEST_F(LocalStepsCompressionTest, ARestartedWorkerResumesTheFeedbackFromItsFile) {
  const std::string dir = testing_util::TempPath("resumed_feedback");
  ASSERT_NO_FATAL_FAILURE(ExactSgdRound2());
  ASSERT_NO_FATAL_FAILURE(Int8SgdRound1(dir));

  LocalStepsTrainer after_restart(dir);
  absl::StatusOr<LocalStepsResult> got2 = Round(after_restart, round2_, sgd_int8_);
  ASSERT_TRUE(got2.ok()) << got2.status();
  ExpectEncodesAndKeeps(*got2, dir, Sum({exact2_.sum.gradient, feedback1_}), tolerance_);
}

// A feedback file that cannot be used (not safetensors, a tensor missing or of another shape or
// dtype) restarts the feedback at zero: the round goes on and writes a good file.
TEST_F(LocalStepsCompressionTest, AnUnusableFeedbackFileStartsTheFeedbackAtZero) {
  ASSERT_NO_FATAL_FAILURE(ExactSgdRound2());
  struct Case {
    std::string name;
    std::function<void(const std::string& path)> spoil;
  };
  auto write = [](const std::string& path, performer::TensorFile file) {
    ASSERT_TRUE(performer::WriteSafetensors(path, file).ok());
  };
  auto good_file = [](const std::string& path) {
    absl::StatusOr<performer::TensorFile> file = performer::ReadSafetensors(path);
    EXPECT_TRUE(file.ok()) << file.status();
    return file.ok() ? *file : performer::TensorFile();
  };
  const std::vector<Case> cases = {
      {"garbage",
       [](const std::string& path) {
         std::ofstream out(path, std::ios::binary | std::ios::trunc);
         out << "garbage: not a safetensors file";
       }},
      {"empty", [](const std::string& path) { std::ofstream out(path, std::ios::binary | std::ios::trunc); }},
      {"missing_tensor",
       [&](const std::string& path) {
         performer::TensorFile file = good_file(path);
         file.tensors.erase(file.tensors.begin());
         write(path, file);
       }},
      {"other_shape",
       [&](const std::string& path) {
         performer::TensorFile file = good_file(path);
         file.tensors.begin()->second = at::zeros({3}, at::kFloat);
         write(path, file);
       }},
      {"float64",
       [&](const std::string& path) {
         performer::TensorFile file = good_file(path);
         for (auto& [name, tensor] : file.tensors) tensor = tensor.to(at::kDouble);
         write(path, file);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = testing_util::TempPath(absl::StrCat("spoilt_feedback_", c.name));
    ASSERT_NO_FATAL_FAILURE(Int8SgdRound1(dir));
    c.spoil(FeedbackFile(dir));

    LocalStepsTrainer after_restart(dir);
    absl::StatusOr<LocalStepsResult> got2 = Round(after_restart, round2_, sgd_int8_);
    ASSERT_TRUE(got2.ok()) << got2.status();
    // Round 2 alone, as if round 1 had lost nothing.
    ExpectEncodesAndKeeps(*got2, dir, exact2_.sum.gradient, tolerance_);
  }
}

TEST_F(LocalStepsCompressionTest, ForgetDropsTheFeedbackInMemoryAndOnDisk) {
  const std::string dir = testing_util::TempPath("forget_feedback");
  ASSERT_NO_FATAL_FAILURE(ExactSgdRound2());
  LocalStepsTrainer trainer(dir);
  ASSERT_NO_FATAL_FAILURE(Int8SgdRound1(dir, &trainer));
  ASSERT_TRUE(std::filesystem::exists(FeedbackFile(dir)));

  trainer.Forget(kJob);
  EXPECT_FALSE(std::filesystem::exists(FeedbackFile(dir)));
  EXPECT_FALSE(std::filesystem::exists(StateFile(dir)));
  EXPECT_THAT(trainer.Jobs(), IsEmpty());
  trainer.Forget(kJob);  // idempotent

  // The job's next round carries nothing over.
  absl::StatusOr<LocalStepsResult> got2 = Round(trainer, round2_, sgd_int8_);
  ASSERT_TRUE(got2.ok()) << got2.status();
  EXPECT_EQ(got2->inner_steps_total, 2);
  ExpectEncodesAndKeeps(*got2, dir, exact2_.sum.gradient, tolerance_);

  // In memory too: after Forget, round 2 is what a fresh trainer sends.
  LocalStepsTrainer in_memory("");
  ASSERT_TRUE(Round(in_memory, round1_, sgd_int8_).ok());
  in_memory.Forget(kJob);
  absl::StatusOr<LocalStepsResult> forgotten = Round(in_memory, round2_, sgd_int8_);
  ASSERT_TRUE(forgotten.ok()) << forgotten.status();
  absl::StatusOr<LocalStepsResult> afresh = Fresh(round2_, sgd_int8_);
  ASSERT_TRUE(afresh.ok()) << afresh.status();
  EXPECT_LT(MaxAbsDifference(forgotten->sum.gradient, afresh->sum.gradient), tolerance_);
}

// A round that fails inside Run leaves the feedback as it was, on disk and in memory.
TEST_F(LocalStepsCompressionTest, AFailedRoundLeavesTheFeedbackAsItWas) {
  const std::string dir = testing_util::TempPath("failed_feedback");
  ASSERT_NO_FATAL_FAILURE(ExactSgdRound2());
  LocalStepsTrainer trainer(dir);
  ASSERT_NO_FATAL_FAILURE(Int8SgdRound1(dir, &trainer));
  EXPECT_EQ(trainer.Run(kJob, round2_, sgd_int8_, predicted_, kNormalizer, OutOfMemory()).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(MaxAbsDifference(ReadFeedback(dir), feedback1_), 0);

  absl::StatusOr<LocalStepsResult> got2 = Round(trainer, round2_, sgd_int8_);
  ASSERT_TRUE(got2.ok()) << got2.status();
  ExpectEncodesAndKeeps(*got2, dir, Sum({exact2_.sum.gradient, feedback1_}), tolerance_);
}

// Exact rounds (compression unset or NONE) send the pseudo-gradient itself and keep no feedback.
TEST_F(LocalStepsCompressionTest, AnExactRoundKeepsNoFeedback) {
  absl::StatusOr<LocalStepsResult> want = Fresh(round1_, sgd_);
  ASSERT_TRUE(want.ok()) << want.status();

  for (v1::Compression compression : {v1::COMPRESSION_UNSPECIFIED, v1::COMPRESSION_NONE}) {
    SCOPED_TRACE(v1::Compression_Name(compression));
    const std::string dir = testing_util::TempPath(absl::StrCat("exact_", v1::Compression_Name(compression)));
    LocalStepsTrainer trainer(dir);
    absl::StatusOr<LocalStepsResult> got = Round(trainer, round1_, Compressed(sgd_, compression));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_THAT(got->encoded, IsEmpty());
    EXPECT_LT(MaxAbsDifference(got->sum.gradient, want->sum.gradient), 1e-13);
    EXPECT_TRUE(std::filesystem::exists(StateFile(dir)));
    EXPECT_FALSE(std::filesystem::exists(FeedbackFile(dir)));
  }
}

}  // namespace
}  // namespace slimfit::worker
