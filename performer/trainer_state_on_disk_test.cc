// Trainer::KeepOptimizerStateIn: AdamW's moments in files step, save and resume bit for bit as
// moments in memory do, and are resident only while a step or a checkpoint passes over them.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/test_util.h"
#include "performer/file_backed_tensors.h"
#include "performer/performer_model.h"
#include "performer/trainer.h"

namespace slimfit::performer {
namespace {

using ::testing::HasSubstr;

ModelConfig Small() {
  ModelConfig config;
  config.vocab = 32;
  config.d_model = 64;
  config.layers = 2;
  config.heads = 4;
  config.d_ff = 128;
  return config;
}

OptimizerSettings AdamW() {
  OptimizerSettings spec;
  spec.kind = OptimizerSettings::Kind::kAdamW;
  spec.beta2 = 0.99;
  spec.learning_rate = 0.01;
  spec.weight_decay = 0.1;
  spec.warmup_steps = 2;
  spec.gradient_clip_norm = 0.5;
  return spec;
}

std::vector<at::Tensor> Start() {
  return PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 7)->parameters();
}

std::vector<at::Tensor> RandomGradient(const std::vector<at::Tensor>& like, int step) {
  at::manual_seed(step);
  std::vector<at::Tensor> g;
  for (const at::Tensor& p : like) g.push_back(at::randn_like(p) * (step % 2 == 0 ? 0.01 : 3.0));
  return g;
}

std::vector<at::Tensor> Clone(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : tensors) out.push_back(t.clone());
  return out;
}

void ExpectBitForBit(const Trainer& a, const Trainer& b, const std::string& where) {
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    EXPECT_TRUE(at::equal(a.parameters()[i], b.parameters()[i])) << where << ", " << a.names()[i];
  }
}

// Every moment the trainer holds is in a file and none of its pages is resident; returns how many.
int ExpectMomentsOnDiskAndNotResident(const Trainer& trainer, const std::string& where) {
  const Trainer::Checkpoint checkpoint = trainer.TakeCheckpoint({});
  int moments = 0;
  for (const auto& [name, tensor] : checkpoint.optimizer_state.tensors) {
    if (name.rfind("step.", 0) == 0) continue;
    ++moments;
    EXPECT_TRUE(IsFileBacked(tensor)) << where << ", " << name;
    EXPECT_EQ(ResidentBytes(tensor), 0) << where << ", " << name;
  }
  return moments;
}

TEST(TrainerStateOnDiskTest, StepsAndCheckpointsEqualMomentsInMemoryBitForBit) {
  for (const bool fused : {true, false}) {
    const std::vector<at::Tensor> start = Start();
    const std::vector<int> trainable = {0, 2, 3, 5, 7};
    auto memory = Trainer::Create(Small(), DType::kFloat32, start, AdamW(), trainable);
    auto disk = Trainer::Create(Small(), DType::kFloat32, start, AdamW(), trainable);
    ASSERT_TRUE(memory.ok() && disk.ok());
    (*memory)->set_fused_steps(fused);
    (*disk)->set_fused_steps(fused);
    ASSERT_TRUE((*disk)->KeepOptimizerStateIn(::testing::TempDir()).ok());
    EXPECT_EQ((*disk)->optimizer_state_directory(), ::testing::TempDir());

    // Before any step the state files are the same: no entries yet.
    const std::string memory_path = testing_util::TempPath(absl::StrCat("memory-", fused, ".safetensors"));
    const std::string disk_path = testing_util::TempPath(absl::StrCat("disk-", fused, ".safetensors"));
    ASSERT_TRUE((*memory)->SaveOptimizerState(memory_path).ok());
    ASSERT_TRUE((*disk)->SaveOptimizerState(disk_path).ok());
    EXPECT_EQ(*base::ReadFileToString(memory_path), *base::ReadFileToString(disk_path));

    for (int s = 1; s <= 4; ++s) {
      const std::vector<at::Tensor> g = RandomGradient(start, s);
      absl::StatusOr<StepResult> a = (*memory)->Step(Clone(g));
      absl::StatusOr<StepResult> b = (*disk)->Step(Clone(g));
      ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
      EXPECT_EQ(a->gradient_norm, b->gradient_norm);
      ExpectBitForBit(**memory, **disk, absl::StrCat("fused ", fused, ", step ", s));
      EXPECT_EQ(ExpectMomentsOnDiskAndNotResident(**disk, absl::StrCat("after step ", s)),
                2 * static_cast<int>(trainable.size()));
    }
    ASSERT_TRUE((*memory)->SaveOptimizerState(memory_path).ok());
    ASSERT_TRUE((*disk)->SaveOptimizerState(disk_path).ok());
    EXPECT_EQ(*base::ReadFileToString(memory_path), *base::ReadFileToString(disk_path)) << "fused " << fused;
    ExpectMomentsOnDiskAndNotResident(**disk, "after writing the checkpoint");
  }
}

TEST(TrainerStateOnDiskTest, ResumedStateGoesToDiskAndContinuesExactly) {
  const std::vector<at::Tensor> start = Start();
  const std::vector<int> trainable = {1, 2, 4, 6};
  auto straight = Trainer::Create(Small(), DType::kFloat32, start, AdamW(), trainable);
  ASSERT_TRUE(straight.ok());
  for (int s = 1; s <= 2; ++s) ASSERT_TRUE((*straight)->Step(RandomGradient(start, s)).ok());
  const std::string model = testing_util::TempPath("resume-model.safetensors");
  const std::string optimizer = testing_util::TempPath("resume-optimizer.safetensors");
  ASSERT_TRUE((*straight)->Save(model, optimizer, {}).ok());

  // Loaded after KeepOptimizerStateIn, and moved there after loading: both end on disk; both
  // step paths.
  for (const bool keep_first : {true, false}) {
    for (const bool fused : {true, false}) {
      const std::string where = absl::StrCat("keep first ", keep_first, ", fused ", fused);
      auto resumed = Trainer::Create(Small(), DType::kFloat32, (*straight)->parameters(), AdamW(), trainable);
      ASSERT_TRUE(resumed.ok());
      (*resumed)->set_fused_steps(fused);
      if (keep_first) {
        ASSERT_TRUE((*resumed)->KeepOptimizerStateIn(::testing::TempDir()).ok());
      }
      ASSERT_TRUE((*resumed)->LoadOptimizerState(optimizer).ok());
      if (!keep_first) {
        ASSERT_TRUE((*resumed)->KeepOptimizerStateIn(::testing::TempDir()).ok());
      }
      EXPECT_EQ((*resumed)->steps(), 2);
      EXPECT_EQ(ExpectMomentsOnDiskAndNotResident(**resumed, where), 2 * static_cast<int>(trainable.size()));
      auto reference =
          Trainer::Create(Small(), DType::kFloat32, (*straight)->parameters(), AdamW(), trainable);
      ASSERT_TRUE(reference.ok());
      (*reference)->set_fused_steps(fused);
      ASSERT_TRUE((*reference)->LoadOptimizerState(optimizer).ok());
      const std::vector<at::Tensor> g = RandomGradient(start, 3);
      ASSERT_TRUE((*resumed)->Step(Clone(g)).ok());
      ASSERT_TRUE((*reference)->Step(Clone(g)).ok());
      ExpectBitForBit(**resumed, **reference, where);
      EXPECT_EQ(ExpectMomentsOnDiskAndNotResident(**resumed, where + ", stepped"),
                2 * static_cast<int>(trainable.size()));
      const std::string resumed_path = testing_util::TempPath("resumed-optimizer.safetensors");
      const std::string reference_path = testing_util::TempPath("reference-optimizer.safetensors");
      ASSERT_TRUE((*resumed)->SaveOptimizerState(resumed_path).ok());
      ASSERT_TRUE((*reference)->SaveOptimizerState(reference_path).ok());
      EXPECT_EQ(*base::ReadFileToString(resumed_path), *base::ReadFileToString(reference_path)) << where;
    }
  }
}

TEST(TrainerStateOnDiskTest, RefusalsNameWhyAndChangeNothing) {
  const std::vector<at::Tensor> start = Start();
  OptimizerSettings sgd;
  sgd.kind = OptimizerSettings::Kind::kSgd;
  sgd.momentum = 0.9;
  sgd.learning_rate = 0.1;
  auto with_sgd = Trainer::Create(Small(), DType::kFloat32, start, sgd);
  ASSERT_TRUE(with_sgd.ok());
  absl::Status refused = (*with_sgd)->KeepOptimizerStateIn(::testing::TempDir());
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("AdamW"));

  auto trainer = Trainer::Create(Small(), DType::kFloat32, start, AdamW());
  ASSERT_TRUE(trainer.ok());
  ASSERT_TRUE((*trainer)->Step(RandomGradient(start, 1)).ok());
  absl::Status missing = (*trainer)->KeepOptimizerStateIn("/nonexistent/optimizer-state");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("/nonexistent/optimizer-state"));
  EXPECT_TRUE((*trainer)->optimizer_state_directory().empty());
  for (const auto& [name, tensor] : (*trainer)->TakeCheckpoint({}).optimizer_state.tensors) {
    EXPECT_FALSE(IsFileBacked(tensor)) << name;  // still in memory, as before
  }
  EXPECT_EQ((*trainer)->KeepOptimizerStateIn("").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::performer
