#include "client/transformer_plan_command.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/transformer_baselines.h"

namespace slimfit::client {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

absl::StatusOr<std::string> RunCommand(std::vector<std::string> args) {
  std::ostringstream out;
  if (absl::Status s = RunTransformerPlanCommand(args, out); !s.ok()) return s;
  return out.str();
}

std::string WriteTempFile(absl::string_view name, absl::string_view contents) {
  const std::string path = testing_util::TempPath(name);
  std::ofstream(path) << contents;
  return path;
}

const std::vector<std::string> kShape = {"--arch=transformer", "--d_model=1024", "--layers=24", "--heads=16"};

std::vector<std::string> WithShape(std::vector<std::string> more) {
  std::vector<std::string> args = kShape;
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

planner::BaselineWorkload ExplicitWorkload(std::vector<int64_t> lengths) {
  planner::BaselineWorkload workload;
  workload.shape.d_model = 1024;
  workload.shape.layers = 24;
  workload.shape.heads = 16;
  workload.batch = planner::BatchSpec::Explicit(std::move(lengths));
  return workload;
}

TEST(TransformerPlanCommandTest, ExplicitLengthsFileGivesTheBaselineTable) {
  const std::string path = WriteTempFile("lengths.txt", "4096\n1024\n\n  512\r\n8\n");
  absl::StatusOr<std::string> text = RunCommand(WithShape({absl::StrCat("--length_distribution=", path)}));
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<std::vector<planner::BaselineRow>> rows =
      planner::ComputeBaselines(ExplicitWorkload({4096, 1024, 512, 8}));
  ASSERT_TRUE(rows.ok());
  EXPECT_THAT(*text, HasSubstr(planner::FormatBaselineTable(*rows)));
  EXPECT_THAT(*text, HasSubstr(absl::StrCat("4 sequences from ", path, ": longest 4096, 5640 tokens")));
  EXPECT_THAT(*text, HasSubstr("d_model 1024, 24 layers, 16 heads, d_ff 4096, vocab 0"));
}

TEST(TransformerPlanCommandTest, UniformBatchGivesTheBaselineTable) {
  absl::StatusOr<std::string> text =
      RunCommand(WithShape({"--vocab=50304", "--batch=8", "--seq_len=4096", "--bytes_per_element=4",
                            "--optimizer=none", "--nodropout"}));
  ASSERT_TRUE(text.ok()) << text.status();
  planner::BaselineWorkload workload;
  workload.shape.d_model = 1024;
  workload.shape.layers = 24;
  workload.shape.heads = 16;
  workload.shape.vocab_size = 50304;
  workload.shape.bytes_per_element = 4;
  workload.shape.dropout = false;
  workload.state.adam = false;
  workload.batch = planner::BatchSpec::Uniform(4096, 8);
  absl::StatusOr<std::vector<planner::BaselineRow>> rows = planner::ComputeBaselines(workload);
  ASSERT_TRUE(rows.ok());
  EXPECT_THAT(*text, HasSubstr(planner::FormatBaselineTable(*rows)));
  EXPECT_THAT(*text, HasSubstr("8 sequences, lengths uniform in 1..4096"));
  EXPECT_THAT(*text, HasSubstr("no dropout"));
  EXPECT_THAT(*text, HasSubstr("no optimizer state"));
}

TEST(TransformerPlanCommandTest, JsonShape) {
  const std::string path = WriteTempFile("lengths_json.txt", "100\n300\n");
  absl::StatusOr<std::string> text =
      RunCommand(WithShape({absl::StrCat("--length_distribution=", path), "--json"}));
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::ordered_json json = nlohmann::ordered_json::parse(*text);
  std::vector<std::string> keys;
  for (auto it = json.begin(); it != json.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"arch", "model", "batch", "bytes_per_element",
                                      "parameter_bytes_per_element", "optimizer", "dropout", "baselines"}));
  EXPECT_EQ(json["arch"], "transformer");
  EXPECT_EQ(json["model"]["d_ff"], 4096);
  EXPECT_EQ(json["batch"]["distribution"], "file");
  EXPECT_EQ(json["batch"]["path"], path);
  EXPECT_EQ(json["batch"]["sequences"], 2.0);
  EXPECT_EQ(json["batch"]["tokens"], 400.0);
  EXPECT_EQ(json["batch"]["max_length"], 300.0);

  absl::StatusOr<std::vector<planner::BaselineRow>> rows =
      planner::ComputeBaselines(ExplicitWorkload({100, 300}));
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(json["baselines"].size(), rows->size());
  for (size_t i = 0; i < rows->size(); ++i) {
    const nlohmann::ordered_json& row = json["baselines"][i];
    EXPECT_EQ(row["layout"], std::string(planner::AttentionLayoutName((*rows)[i].layout)));
    EXPECT_EQ(row["recompute"], std::string(planner::RecomputeName((*rows)[i].recompute)));
    EXPECT_EQ(row["total_bytes"], (*rows)[i].total_bytes);
    EXPECT_EQ(row["activation_bytes"], (*rows)[i].activation_bytes);
    EXPECT_EQ(row["compute_overhead_fraction"], (*rows)[i].compute_overhead_fraction);
  }
}

TEST(TransformerPlanCommandTest, UniformNeedsBatchAndSeqLen) {
  absl::StatusOr<std::string> text = RunCommand(WithShape({"--batch=8"}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("needs --batch=B and --seq_len=L"));
}

TEST(TransformerPlanCommandTest, FileRefusesBatchAndSeqLen) {
  const std::string path = WriteTempFile("lengths_refuse.txt", "100\n");
  absl::StatusOr<std::string> text =
      RunCommand(WithShape({absl::StrCat("--length_distribution=", path), "--seq_len=100"}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("the file gives the lengths"));
}

TEST(TransformerPlanCommandTest, MissingFileIsNotFound) {
  absl::StatusOr<std::string> text = RunCommand(WithShape({"--length_distribution=/no/such/lengths"}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(text.status()), HasSubstr("/no/such/lengths"));
}

TEST(TransformerPlanCommandTest, BadLengthsFileNamesPathAndLine) {
  const std::string path = WriteTempFile("lengths_bad.txt", "100\n\nabc\n");
  absl::StatusOr<std::string> text = RunCommand(WithShape({absl::StrCat("--length_distribution=", path)}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr(absl::StrCat(path, ": line 3")));
}

TEST(TransformerPlanCommandTest, InvalidShapeNamesTheField) {
  absl::StatusOr<std::string> text = RunCommand(
      {"--arch=transformer", "--d_model=1000", "--layers=2", "--heads=3", "--batch=1", "--seq_len=10"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("heads"));

  text = RunCommand(WithShape({"--batch=1", "--seq_len=10", "--bytes_per_element=3"}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("bytes_per_element"));

  text = RunCommand(WithShape({"--batch=1", "--seq_len=10", "--bytes_per_element=1000"}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--bytes_per_element=1000"));

  text = RunCommand(WithShape({"--batch=1", "--seq_len=10", "--optimizer=sgd"}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--optimizer=sgd"));
}

TEST(TransformerPlanCommandTest, RejectsPerformerFlags) {
  absl::StatusOr<std::string> text = RunCommand(WithShape({"--batch=1", "--seq_len=10", "--features=relu"}));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("unknown flag --features"));
}

}  // namespace
}  // namespace slimfit::client
