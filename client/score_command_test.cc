#include "client/score_command.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "performer/gradient_engine.h"
#include "performer/model_checkpoint.h"

namespace slimfit::client {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr char kText[] =
    "Permission is hereby granted, free of charge, to any person obtaining a copy\n\n"
    "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND\n\n"
    "x\n\n"
    "Redistribution and use in source and binary forms, with or without modification, are permitted.";

performer::PerformerModel MustCreate(performer::FeatureMap map) {
  performer::ModelConfig config;
  config.vocab = 256;
  config.d_model = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 32;
  config.feature_map = map;
  absl::StatusOr<performer::PerformerModel> model =
      performer::PerformerModel::Create(config, performer::DType::kFloat64, at::kCPU, /*seed=*/4);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

// The engine's loss (full back-propagation) of documents given as strings, each its own batch when
// `separately`, else packed into one.
double EngineLoss(const performer::PerformerModel& model, const std::vector<std::string>& documents,
                  uint64_t seed) {
  performer::Plan plan;
  plan.dtype = performer::DType::kFloat64;
  performer::GradientOptions options;
  options.feature_seed = seed;
  performer::PackedBatch batch;
  for (const std::string& document : documents) {
    batch.doc_starts.push_back(batch.size());
    for (unsigned char c : document) batch.tokens.push_back(c);
  }
  absl::StatusOr<performer::GradientResult> result = performer::ComputeGradient(model, batch, plan, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->loss_sum : NAN;
}

std::vector<std::string> Documents() {
  std::vector<std::string> documents;
  std::string text = kText;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find("\n\n", begin);
    documents.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 2;
  }
  return documents;
}

struct CommandRun {
  absl::Status status;
  std::string out;
  nlohmann::json json;
};

CommandRun Score(std::vector<std::string> args) {
  std::ostringstream out;
  CommandRun run;
  run.status = RunScoreCommand(args, out);
  run.out = out.str();
  if (run.status.ok() && absl::c_linear_search(args, "--json")) run.json = nlohmann::json::parse(run.out);
  return run;
}

TEST(ScoreCommand, BitsPerByteOfDocumentsAreTheEnginesLoss) {
  const performer::PerformerModel model = MustCreate(performer::FeatureMap::kSqr);
  const std::string path = testing_util::TempPath("sqr.safetensors");
  ASSERT_TRUE(performer::SaveModel(path, model).ok());
  const std::string data = testing_util::WriteTempFile("licences.txt", kText);
  const double want = EngineLoss(model, Documents(), 0);
  const CommandRun run = Score({"--model=" + path, "--data=" + data, "--separator=\\n\\n", "--dtype=float64",
                                "--stretch=7", "--json"});
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_NEAR(run.json["loss_sum_nats"].get<double>(), want, 1e-9 * want);
  EXPECT_EQ(run.json["documents"], 4);
  const int64_t predicted = std::string(kText).size() - 3 * 2 - 4;  // less separators, less each first byte
  EXPECT_EQ(run.json["predicted_tokens"], predicted);
  EXPECT_NEAR(run.json["bits_per_byte"].get<double>(), want / predicted / std::log(2.0), 1e-9);

  const CommandRun line =
      Score({"--model=" + path, "--data=" + data, "--separator=\\n\\n", "--dtype=float64"});
  ASSERT_TRUE(line.status.ok()) << line.status;
  EXPECT_THAT(line.out,
              MatchesRegex(".*licences.txt: [0-9.]+ bits per byte over [0-9,]+ predicted bytes .*\n"));
}

TEST(ScoreCommand, SequencesOfLTokensRestartTheStateAsTrainingDoes) {
  const performer::PerformerModel model = MustCreate(performer::FeatureMap::kSqr);
  const std::string path = testing_util::TempPath("seq.safetensors");
  ASSERT_TRUE(performer::SaveModel(path, model).ok());
  const std::string text = std::string(kText).substr(0, 100);  // one document
  const std::string data = testing_util::WriteTempFile("one.txt", text);
  double want = 0;
  for (size_t begin = 0; begin < text.size(); begin += 32)
    want += EngineLoss(model, {text.substr(begin, 32)}, 0);
  const CommandRun run =
      Score({"--model=" + path, "--data=" + data, "--sequence_length=32", "--dtype=float64", "--json"});
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_NEAR(run.json["loss_sum_nats"].get<double>(), want, 1e-9 * want);
  EXPECT_EQ(run.json["predicted_tokens"], 100 - 4);  // sequences of 32, 32, 32 and 4 tokens
}

TEST(ScoreCommand, FavorModelsUseTheSeedTheirCheckpointRecords) {
  const performer::PerformerModel model = MustCreate(performer::FeatureMap::kFavor);
  const std::string path = testing_util::TempPath("favor.safetensors");
  ASSERT_TRUE(performer::SaveModel(path, model, {{performer::kFeatureSeedKey, "9"}}).ok());
  const std::string data = testing_util::WriteTempFile("favor.txt", "Permission is hereby granted");
  const double want = EngineLoss(model, {"Permission is hereby granted"}, 9);
  const CommandRun recorded = Score({"--model=" + path, "--data=" + data, "--dtype=float64", "--json"});
  ASSERT_TRUE(recorded.status.ok()) << recorded.status;
  EXPECT_NEAR(recorded.json["loss_sum_nats"].get<double>(), want, 1e-9 * want);
  const CommandRun other =
      Score({"--model=" + path, "--data=" + data, "--dtype=float64", "--feature_seed=1", "--json"});
  ASSERT_TRUE(other.status.ok()) << other.status;
  EXPECT_GT(std::abs(other.json["loss_sum_nats"].get<double>() - want), 1e-6 * want);
}

TEST(ScoreCommand, BadInputGetsAClearError) {
  const performer::PerformerModel model = MustCreate(performer::FeatureMap::kSqr);
  const std::string path = testing_util::TempPath("errors.safetensors");
  ASSERT_TRUE(performer::SaveModel(path, model).ok());
  const std::string text = testing_util::WriteTempFile("text.txt", "abc");
  const std::string singles = testing_util::WriteTempFile("singles.txt", "a|b|c");
  const std::string odd = testing_util::WriteTempFile("odd.bin", "abc");
  const std::string wide =
      testing_util::WriteTempFile("wide.bin", std::string("\x01\x00\x00\x00\x01\x02\x03\x04", 8));
  struct Case {
    std::vector<std::string> args;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {{"--model=" + path}, absl::StatusCode::kInvalidArgument, "--data"},
      {{"--model=" + path, "--data=/nonexistent.txt"}, absl::StatusCode::kNotFound, "/nonexistent.txt"},
      {{"--model=" + path, "--data=" + singles, "--separator=|"},
       absl::StatusCode::kInvalidArgument,
       "predicts nothing"},
      {{"--model=" + path, "--data=" + odd, "--data_type=uint16"},
       absl::StatusCode::kInvalidArgument,
       "whole number"},
      {{"--model=" + path, "--data=" + wide, "--data_type=uint32"},
       absl::StatusCode::kInvalidArgument,
       "token 1 = 67305985 is outside the model's vocabulary [0, 256)"},
      {{"--model=" + path, "--data=" + text, "--data_type=utf8"},
       absl::StatusCode::kInvalidArgument,
       "--data_type"},
      {{"--model=" + path, "--data=" + text, "--sequence_length=1"},
       absl::StatusCode::kInvalidArgument,
       "--sequence_length"},
      {{"--model=" + path, "--data=" + text, "--stretch=0"}, absl::StatusCode::kInvalidArgument, "--stretch"},
  };
  for (const Case& c : cases) {
    const CommandRun run = Score(c.args);
    EXPECT_EQ(run.status.code(), c.code) << run.status;
    EXPECT_THAT(run.status.message(), HasSubstr(c.message)) << run.status;
  }
}

}  // namespace
}  // namespace slimfit::client
