#include "base/human_format.h"

#include <limits>

#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

TEST(HumanFormat, Durations) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(44.6), "45s");
  EXPECT_EQ(FormatDuration(723), "12m 03s");
  EXPECT_EQ(FormatDuration(3 * 3600 + 4 * 60 + 5), "3h 04m");
  EXPECT_EQ(FormatDuration(2 * 86400 + 3 * 3600), "2d 03h");
  EXPECT_EQ(FormatDuration(-1), "-");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::infinity()), "-");
}

TEST(HumanFormat, RatesAndCounts) {
  EXPECT_EQ(FormatRate(950), "950 tokens/s");
  EXPECT_EQ(FormatRate(12345), "12.3k tokens/s");
  EXPECT_EQ(FormatRate(4.56e6), "4.56M tokens/s");
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(1234567), "1,234,567");
  EXPECT_EQ(FormatCount(-1000), "-1,000");
}

}  // namespace
}  // namespace slimfit::base
