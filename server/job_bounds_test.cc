#include "server/job_bounds.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "rpc/rpc_util.h"

namespace slimfit::server {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

v1::JobSpec Spec(int64_t rounds, int64_t tokens_per_round) {
  v1::JobSpec spec;
  spec.set_rounds(rounds);
  spec.set_tokens_per_round(tokens_per_round);
  spec.set_sequence_length(2);
  return spec;
}

// The INVALID_ARGUMENT's field (ErrorDetail.field, and the message's start).
void ExpectRejectedNaming(const absl::Status& status, const std::string& field) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(status.message().substr(0, field.size() + 1), field + ":") << status;
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(status);
  ASSERT_TRUE(detail.has_value()) << status;
  EXPECT_EQ(detail->field(), field);
}

TEST(JobBoundsTest, MaxRoundsIsTheLargestCountWhoseTokensFit) {
  EXPECT_EQ(MaxRounds(1024, 1), kMax / 1024);
  EXPECT_EQ(MaxRounds(1024, 8), kMax / 8192);
  EXPECT_EQ(MaxRounds(kMax, 1), 1);
  EXPECT_EQ(MaxRounds(kMax / 2 + 1, 2), 0);
}

TEST(JobBoundsTest, RoundsTimesTokensPerRoundIsBounded) {
  // The submission: 9·10^18 rounds of 1024 tokens.
  ExpectRejectedNaming(CheckCounterBounds(Spec(9000000000000000000, 1024)), "spec.rounds");
  const int64_t most = kMax / 1024;
  EXPECT_TRUE(CheckCounterBounds(Spec(most, 1024)).ok());
  const absl::Status over = CheckCounterBounds(Spec(most + 1, 1024));
  ExpectRejectedNaming(over, "spec.rounds");
  EXPECT_NE(over.message().find(absl::StrCat("at most ", most, " rounds")), absl::string_view::npos) << over;
  EXPECT_TRUE(CheckCounterBounds(Spec(1, kMax)).ok()) << "one round of every token there can be";
  ExpectRejectedNaming(CheckCounterBounds(Spec(2, kMax)), "spec.rounds");
}

TEST(JobBoundsTest, LocalStepsMultiplyTheTokensOfARound) {
  const int64_t most = kMax / (10000 * int64_t{4096});
  v1::JobSpec spec = Spec(most, 4096);
  spec.set_local_steps(10000);
  EXPECT_TRUE(CheckCounterBounds(spec).ok());
  spec.set_rounds(most + 1);
  const absl::Status over = CheckCounterBounds(spec);
  ExpectRejectedNaming(over, "spec.rounds");
  EXPECT_NE(over.message().find("10000 local_steps"), absl::string_view::npos) << over;
  // The same rounds without local steps fit.
  spec.clear_local_steps();
  EXPECT_TRUE(CheckCounterBounds(spec).ok());
}

TEST(JobBoundsTest, OneRoundOfMoreTokensThanTheCountersHoldNamesTokensPerRound) {
  v1::JobSpec spec = Spec(1, kMax / 2);
  spec.set_local_steps(2);
  EXPECT_TRUE(CheckCounterBounds(spec).ok());
  spec.set_tokens_per_round(kMax / 2 + 1);
  ExpectRejectedNaming(CheckCounterBounds(spec), "spec.tokens_per_round");
}

}  // namespace
}  // namespace slimfit::server
