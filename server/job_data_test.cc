#include "server/job_data.h"

#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  EXPECT_THAT(JobData::Create(Text(900), 256, 100, 50, 0.0, 0).status().message(), HasSubstr("spec.tokens_per_round"));
  EXPECT_THAT(JobData::Create(Text(900), 256, 1, 50, 0.0, 0).status().message(), HasSubstr("spec.sequence_length"));
  EXPECT_THAT(JobData::Create(Text(900), 256, 100, 100, 0.6, 0).status().message(),
              HasSubstr("spec.held_out_fraction"));
  EXPECT_THAT(JobData::Create(Text(900), 256, 100, int64_t{1} << 50, 0.0, 0).status().message(),
              HasSubstr("a round takes at most"));
  EXPECT_THAT(JobData::Create(Text(900), 50, 100, 100, 0.0, 0).status().message(),
              HasSubstr("outside the model's vocabulary of 50"));
}

}  // namespace
}  // namespace slimfit::server
