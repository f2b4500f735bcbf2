#include "performer/parameter_selection.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::performer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParameterSelectionTest, StarsMatchAnyRunAndTheRestLiterally) {
  EXPECT_TRUE(MatchesPattern("layers.1.*", "layers.1.attention.q.weight"));
  EXPECT_FALSE(MatchesPattern("layers.1.*", "layers.11.attention.q.weight"));
  EXPECT_TRUE(MatchesPattern("*.bias", "layers.0.ff.1.bias"));
  EXPECT_FALSE(MatchesPattern("*.bias", "layers.0.ff.1.bias.x"));
  EXPECT_TRUE(MatchesPattern("*", "anything"));
  EXPECT_TRUE(MatchesPattern("a*b*c", "axxbyybzc"));
  EXPECT_FALSE(MatchesPattern("a*b*c", "axxbyy"));
  EXPECT_TRUE(MatchesPattern("exact", "exact"));
  EXPECT_FALSE(MatchesPattern("exact", "exactly"));
}

TEST(ParameterSelectionTest, SelectsTheUnionInModelOrder) {
  const std::vector<std::string> names = {"embedding", "layers.0.q", "layers.1.q", "layers.1.k",
                                          "output_logit_map.weight"};
  absl::StatusOr<std::vector<int>> selected = SelectParameters(names, "output_logit_map.*, layers.1.*");
  ASSERT_TRUE(selected.ok()) << selected.status();
  EXPECT_THAT(*selected, ElementsAre(2, 3, 4));
  EXPECT_THAT(*SelectParameters(names, ""), ElementsAre(0, 1, 2, 3, 4));

  absl::StatusOr<std::vector<int>> none = SelectParameters(names, "layers.9.*");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(),
              HasSubstr("spec.trainable: 'layers.9.*' matches no parameter; the model's are embedding"));
  EXPECT_THAT(SelectParameters(names, "embedding,,layers.0.q").status().message(),
              HasSubstr("an empty pattern"));
}

}  // namespace
}  // namespace slimfit::performer
