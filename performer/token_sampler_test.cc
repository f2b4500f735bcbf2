#include "performer/token_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace slimfit::performer {
namespace {

using ::testing::HasSubstr;

at::Tensor LogProbs(const std::vector<double>& probabilities) {
  return at::log(at::tensor(probabilities, at::kDouble));
}

std::map<int64_t, int> Draws(const SamplingOptions& options, const at::Tensor& log_probs, int n,
                             uint64_t seed) {
  TokenSampler sampler(options, seed);
  std::map<int64_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[sampler.Next(log_probs)];
  return counts;
}

TEST(TokenSampler, GreedyAndTopOneTakeTheMostLikelyToken) {
  const at::Tensor lp = LogProbs({0.1, 0.5, 0.4});
  EXPECT_EQ(TokenSampler({0.0, 0}, 1).Next(lp), 1);
  EXPECT_EQ(TokenSampler({5.0, 1}, 1).Next(lp), 1);
  // Ties go to the lower id.
  EXPECT_EQ(TokenSampler({0.0, 0}, 1).Next(LogProbs({0.2, 0.4, 0.4})), 1);
}

TEST(TokenSampler, SamplesFollowTheDistribution) {
  const std::map<int64_t, int> counts = Draws({1.0, 0}, LogProbs({0.1, 0.6, 0.3}), 20000, 7);
  EXPECT_NEAR(counts.at(0) / 20000.0, 0.1, 0.015);
  EXPECT_NEAR(counts.at(1) / 20000.0, 0.6, 0.015);
  EXPECT_NEAR(counts.at(2) / 20000.0, 0.3, 0.015);
}

TEST(TokenSampler, TopKKeepsOnlyTheKMostLikelyAndRenormalises) {
  const std::map<int64_t, int> counts = Draws({1.0, 2}, LogProbs({0.1, 0.45, 0.15, 0.3}), 20000, 3);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts.at(1) / 20000.0, 0.6, 0.015);
  EXPECT_NEAR(counts.at(3) / 20000.0, 0.4, 0.015);
  // At a tie on the k-th value, higher tokens are all kept and the lower ids fill what is left.
  const std::map<int64_t, int> tied = Draws({1.0, 2}, LogProbs({0.2, 0.2, 0.6}), 2000, 3);
  EXPECT_EQ(tied.size(), 2u);
  EXPECT_EQ(tied.count(0), 1u);
  EXPECT_EQ(tied.count(2), 1u);
}

TEST(TokenSampler, LowTemperatureSharpensHighTemperatureFlattens) {
  const at::Tensor lp = LogProbs({0.2, 0.8});
  EXPECT_GT(Draws({0.25, 0}, lp, 4000, 5).at(1), 3900);                     // 0.8⁴ : 0.2⁴ ≈ 0.996
  EXPECT_NEAR(Draws({100.0, 0}, lp, 20000, 5).at(1) / 20000.0, 0.5, 0.02);  // nearly uniform
}

TEST(TokenSampler, TheSameSeedGivesTheSameTokens) {
  const at::Tensor lp = LogProbs({0.25, 0.25, 0.25, 0.25});
  TokenSampler a({1.0, 0}, 42), b({1.0, 0}, 42), c({1.0, 0}, 43);
  std::vector<int64_t> from_a, from_b, from_c;
  for (int i = 0; i < 64; ++i) {
    from_a.push_back(a.Next(lp));
    from_b.push_back(b.Next(lp));
    from_c.push_back(c.Next(lp));
  }
  EXPECT_EQ(from_a, from_b);
  EXPECT_NE(from_a, from_c);
}

TEST(TokenSampler, BadOptionsAreRefused) {
  EXPECT_THAT(ValidateSamplingOptions({-1.0, 0}).message(), HasSubstr("temperature"));
  EXPECT_THAT(ValidateSamplingOptions({std::nan(""), 0}).message(), HasSubstr("temperature"));
  EXPECT_THAT(ValidateSamplingOptions({1.0, -3}).message(), HasSubstr("top_k"));
  EXPECT_TRUE(ValidateSamplingOptions({0.0, 0}).ok());
}

}  // namespace
}  // namespace slimfit::performer
