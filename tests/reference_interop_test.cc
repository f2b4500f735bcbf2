// Model files move both ways between slimfit and the reference PyTorch implementation:
//  - every model file slimfit writes (a job's checkpoints and exports, written by the trainer; the
//    tools' SaveModel) loads into an independent PyTorch implementation with the reference
//    parameter names (tests/testdata/score_in_reference.py, Debian's python3-torch) and scores a
//    sequence exactly as the engine does;
//  - a safetensors file with the reference names and no slimfit metadata (what the reference
//    implementation's state_dict gives) is taken by gradient_bench --init when the shape flags are
//    given, and refused with a message saying to give them otherwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/test_util.h"
#include "performer/gradient_engine.h"
#include "performer/model_checkpoint.h"
#include "performer/trainer.h"
#include "proto/slimfit.pb.h"
#include "tests/daemon_process.h"

namespace slimfit {
namespace {

using ::testing::HasSubstr;

struct Shape {
  const char* feature;
  const char* layernorm;
};

performer::ModelConfig Config(const Shape& shape) {
  performer::ModelConfig config;
  config.vocab = 256;
  config.d_model = 32;
  config.layers = 2;
  config.heads = 4;
  config.d_ff = 64;
  config.feature_map = *performer::ParseFeatureMap(shape.feature);
  config.layernorm = *performer::ParseLayerNormPlacement(shape.layernorm);
  return config;
}

std::vector<int64_t> Tokens() {
  std::vector<int64_t> tokens;
  for (unsigned char c : std::string("The prefix-sum front is all a slice carries forward."))
    tokens.push_back(c);
  return tokens;
}

// The loss sum the reference implementation computes for `tokens` (one document) with the model
// in `path`; the script's one-line reason on failure.
absl::StatusOr<double> ScoreInReference(const std::string& path, const std::vector<int64_t>& tokens) {
  absl::StatusOr<testing_util::CommandResult> run = testing_util::RunCommand(
      "/usr/bin/python3",
      {testing_util::RunfilePath("tests/testdata/score_in_reference.py"), path, absl::StrJoin(tokens, ",")},
      absl::Seconds(120));
  if (!run.ok()) return run.status();
  if (run->exit_status != 0) return absl::InternalError(absl::StrCat("score_in_reference.py: ", run->err));
  const std::string key = "\"loss_sum\": ";
  const size_t at = run->out.find(key);
  double loss_sum = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtod(run->out.substr(at + key.size(), run->out.find(',', at) - at - key.size()),
                        &loss_sum)) {
    return absl::InternalError(absl::StrCat("unexpected output: ", run->out));
  }
  return loss_sum;
}

double EngineLossSum(const performer::PerformerModel& model, const std::vector<int64_t>& tokens) {
  performer::PackedBatch batch;
  batch.tokens = tokens;
  batch.doc_starts = {0};
  performer::Plan plan;  // full back-propagation, float32
  absl::StatusOr<performer::GradientResult> result = performer::ComputeGradient(model, batch, plan, {});
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->loss_sum : -1;
}

class ReferenceInteropTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ReferenceInteropTest, CheckpointsAndSavedModelsScoreTheSameInTheReferenceImplementation) {
  const performer::ModelConfig config = Config(GetParam());
  absl::StatusOr<performer::PerformerModel> model =
      performer::PerformerModel::Create(config, performer::DType::kFloat32, at::kCPU, /*seed=*/7);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int64_t> tokens = Tokens();
  const double engine = EngineLossSum(*model, tokens);

  // What a job's checkpoint (and so `slimfit export`) holds: the trainer's file.
  const performer::OptimizerSettings optimizer = performer::OptimizerSettings::AdamW(1e-3);
  std::vector<at::Tensor> parameters;
  for (const at::Tensor& p : model->parameters()) parameters.push_back(p.detach().clone());
  absl::StatusOr<std::unique_ptr<performer::Trainer>> trainer =
      performer::Trainer::Create(config, performer::DType::kFloat32, parameters, optimizer);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const std::string checkpoint = testing_util::TempPath("checkpoint.safetensors");
  ASSERT_TRUE((*trainer)
                  ->Save(checkpoint, testing_util::TempPath("checkpoint.optimizer.safetensors"),
                         {{"job_id", "job-000001"}, {"round", "3"}})
                  .ok());
  // What the tools write (gradient_bench, tests).
  const std::string saved = testing_util::TempPath("saved.safetensors");
  ASSERT_TRUE(performer::SaveModel(saved, *model).ok());

  for (const std::string& path : {checkpoint, saved}) {
    absl::StatusOr<double> reference = ScoreInReference(path, tokens);
    ASSERT_TRUE(reference.ok()) << path << ": " << reference.status();
    EXPECT_NEAR(*reference, engine, 1e-5 * std::abs(engine)) << path;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ReferenceInteropTest,
                         ::testing::Values(Shape{"sqr", "post"}, Shape{"relu", "pre"},
                                           Shape{"elu+1", "post"}));

TEST(ReferenceFileTest, AFileWithoutSlimfitMetadataLoadsWithTheShapeGivenByFlags) {
  const performer::ModelConfig config = Config({"sqr", "post"});
  absl::StatusOr<performer::PerformerModel> model =
      performer::PerformerModel::Create(config, performer::DType::kFloat32, at::kCPU, /*seed=*/3);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string path = testing_util::TempPath("reference_state_dict.safetensors");
  ASSERT_TRUE(performer::SaveNamedTensors(path, model->names(), model->parameters()).ok());

  const std::string bench = testing_util::RunfilePath("bench/gradient_bench");
  const std::vector<std::string> run = {"--init=" + path, "--seq_len=64", "--slice=16", "--repeats=1",
                                        "--format=table"};
  std::vector<std::string> with_shape = run;
  for (const char* flag : {"--vocab=256", "--d_model=32", "--layers=2", "--heads=4", "--d_ff=64"}) {
    with_shape.push_back(flag);
  }
  absl::StatusOr<testing_util::CommandResult> loaded =
      testing_util::RunCommand(bench, with_shape, absl::Seconds(120));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->exit_status, 0) << loaded->err;

  absl::StatusOr<testing_util::CommandResult> refused =
      testing_util::RunCommand(bench, run, absl::Seconds(120));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->exit_status, 1);
  EXPECT_THAT(refused->err, HasSubstr("does not describe its model"));
  EXPECT_THAT(refused->err, HasSubstr("pass the model's shape"));

  // A shape that disagrees with the file's tensors is refused, naming a tensor.
  std::vector<std::string> wrong = run;
  wrong.push_back("--d_model=64");
  absl::StatusOr<testing_util::CommandResult> mismatch =
      testing_util::RunCommand(bench, wrong, absl::Seconds(120));
  ASSERT_TRUE(mismatch.ok()) << mismatch.status();
  EXPECT_EQ(mismatch->exit_status, 1);
  EXPECT_THAT(mismatch->err, HasSubstr("input_map.weight"));
}

}  // namespace
}  // namespace slimfit
