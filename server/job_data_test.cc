#include "server/job_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace slimfit::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

rpc::TokenStream Text(int64_t n) {
  rpc::TokenStream stream;
  for (int64_t i = 0; i < n; ++i) stream.tokens.push_back(static_cast<int32_t>('a' + i % 26));
  stream.doc_starts = {0};
  return stream;
}

TEST(JobDataTest, SplitsHeldOutFromTheEnd) {
  absl::StatusOr<JobData> data = JobData::Create(Text(1000), 256, 100, 300, 0.2, 7);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->training_sequences(), 8);
  EXPECT_EQ(data->held_out_sequences(), 2);
  EXPECT_EQ(data->sequences_per_round(), 3);
  std::vector<SequenceRef> held_out = data->HeldOutSequences();
  ASSERT_EQ(held_out.size(), 2u);
  EXPECT_EQ(held_out[0].begin, 800);
}

TEST(JobDataTest, RoundsWalkSeededEpochPermutations) {
  absl::StatusOr<JobData> data = JobData::Create(Text(1000), 256, 100, 200, 0.0, 7);
  ASSERT_TRUE(data.ok());
  // 10 sequences, 2 per round: rounds 1..5 are one epoch and cover every sequence once.
  std::set<int64_t> seen;
  for (int64_t round = 1; round <= 5; ++round) {
    for (const SequenceRef& s : data->RoundSequences(round)) seen.insert(s.begin);
  }
  EXPECT_EQ(seen.size(), 10u);
  // Same seed, same order; another seed, another order.
  absl::StatusOr<JobData> same = JobData::Create(Text(1000), 256, 100, 200, 0.0, 7);
  absl::StatusOr<JobData> other = JobData::Create(Text(1000), 256, 100, 200, 0.0, 8);
  bool differs = false;
  for (int64_t round = 1; round <= 5; ++round) {
    EXPECT_EQ(data->RoundSequences(round)[0].begin, same->RoundSequences(round)[0].begin);
    differs |= data->RoundSequences(round)[0].begin != other->RoundSequences(round)[0].begin;
  }
  EXPECT_TRUE(differs);
}

TEST(JobDataTest, GatherRestartsDocumentsAtSequenceStarts) {
  rpc::TokenStream stream = Text(40);
  stream.doc_starts = {0, 5, 12, 25};
  absl::StatusOr<JobData> data = JobData::Create(stream, 256, 10, 20, 0.0, 0);
  ASSERT_TRUE(data.ok());
  std::vector<int64_t> tokens, starts;
  data->Gather({{0, 10}, {20, 10}}, &tokens, &starts);
  EXPECT_EQ(tokens.size(), 20u);
  EXPECT_THAT(starts, ElementsAre(0, 5, 10, 15));
  EXPECT_EQ(data->PredictedTokens({{0, 10}, {20, 10}}), 20 - 4);
  EXPECT_EQ(data->max_documents_per_sequence(), 2);
}

TEST(JobDataTest, ErrorsNameTheProblem) {
  EXPECT_THAT(JobData::Create(Text(900), 256, 1024, 1024, 0.0, 0).status().message(),
              HasSubstr("datasets hold 900 training tokens; sequence_length is 1024"));
  EXPECT_EQ(JobData::Create(Text(900), 256, 1024, 1024, 0.0, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(JobData::Create(Text(900), 256, 100, 50, 0.0, 0).status().message(),
              HasSubstr("spec.tokens_per_round"));
  EXPECT_THAT(JobData::Create(Text(900), 256, 1, 50, 0.0, 0).status().message(),
              HasSubstr("spec.sequence_length"));
  EXPECT_THAT(JobData::Create(Text(900), 256, 100, 100, 0.6, 0).status().message(),
              HasSubstr("spec.held_out_fraction"));
  EXPECT_THAT(JobData::Create(Text(900), 256, 100, int64_t{1} << 50, 0.0, 0).status().message(),
              HasSubstr("a round takes at most"));
  EXPECT_THAT(JobData::Create(Text(900), 50, 100, 100, 0.0, 0).status().message(),
              HasSubstr("outside the model's vocabulary of 50"));
}

LocalSource Local(const std::string& name, std::vector<int64_t> documents) {
  LocalSource source;
  source.sha256 = std::string(64, name[0]);
  source.name = name;
  source.documents = std::move(documents);
  return source;
}

TEST(JobDataTest, LocalDatasetsAreSourcesOfTheirOwnWithTheSameHeldOutRule) {
  // Uploads: 10 sequences (2 held out); "a": 5 (1 held out); "b": 4 (1 held out).
  absl::StatusOr<JobData> data = JobData::Create(
      Text(1000), {Local("a", {1, 2, 1, 3, 1}), Local("b", {4, 1, 1, 2})}, 256, 100, 300, 0.2, 7);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->training_sequences(), 8 + 4 + 3);
  EXPECT_EQ(data->held_out_sequences(), 2 + 1 + 1);
  EXPECT_EQ(data->max_documents_per_sequence(), 4);
  std::vector<SequenceRef> held_out = data->HeldOutSequences();
  ASSERT_EQ(held_out.size(), 4u);
  EXPECT_EQ(held_out[2].source, 1);
  EXPECT_EQ(held_out[2].begin, 400);  // "a"'s last sequence
  EXPECT_EQ(data->DocumentsIn(held_out[2]), 1);
  EXPECT_EQ(held_out[3].source, 2);
  EXPECT_EQ(data->DocumentsIn(held_out[3]), 2);
  EXPECT_EQ(data->PredictedTokens({held_out[3]}), 98);
  ASSERT_NE(data->LocalSourceOf(held_out[3]), nullptr);
  EXPECT_EQ(data->LocalSourceOf(held_out[3])->name, "b");
  EXPECT_EQ(data->LocalSourceOf(held_out[0]), nullptr);

  // One epoch (15 training sequences, 3 per round) covers every training sequence of every source
  // once, and never a held-out one.
  std::set<std::pair<int, int64_t>> seen;
  for (int64_t round = 1; round <= 5; ++round) {
    for (const SequenceRef& s : data->RoundSequences(round)) {
      EXPECT_EQ(s.length, 100);
      seen.insert({s.source, s.begin});
    }
  }
  EXPECT_EQ(seen.size(), 15u);
  for (const auto& [source, begin] : seen) {
    const int64_t limit = source == 0 ? 800 : source == 1 ? 400 : 300;
    EXPECT_LT(begin, limit) << "source " << source;
  }
}

TEST(JobDataTest, LocalDatasetsAloneNeedNoUploads) {
  absl::StatusOr<JobData> data =
      JobData::Create(rpc::TokenStream{}, {Local("a", {1, 1, 1})}, 256, 64, 128, 0.0, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->training_sequences(), 3);
  for (const SequenceRef& s : data->RoundSequences(1)) EXPECT_EQ(s.source, 1);
}

TEST(JobDataTest, ALocalDatasetWithoutATrainingSequenceIsRefusedByIndex) {
  absl::StatusOr<JobData> data =
      JobData::Create(Text(1000), {Local("a", {1, 1}), Local("tiny", {})}, 256, 100, 300, 0.0, 7);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(data.status().message(), HasSubstr("spec.local_datasets[1]: local dataset tiny holds 0 whole"));
}

}  // namespace
}  // namespace slimfit::server
