#include "client/text_table.h"

#include "gtest/gtest.h"

namespace slimfit::client {
namespace {

TEST(TextTableTest, PadsColumnsAndAlignsNumbersRight) {
  TextTable table({{"ID"}, {"STATE"}, {"LOSS", TextTable::kRight}});
  table.AddRow({"job-000017", "RUNNING", "2.3456"});
  table.AddRow({"job-2", "QUEUED", "-"});
  EXPECT_EQ(table.rows(), 2u);
  EXPECT_EQ(table.Render(),
            "ID          STATE      LOSS\n"
            "job-000017  RUNNING  2.3456\n"
            "job-2       QUEUED        -\n");
}

TEST(TextTableTest, NoTrailingSpacesAndHeaderAloneWhenEmpty) {
  TextTable table({{"NAME"}, {"NOTE"}});
  EXPECT_EQ(table.Render(), "NAME  NOTE\n");
  table.AddRow({"a-long-name", ""});
  EXPECT_EQ(table.Render(),
            "NAME         NOTE\n"
            "a-long-name\n");
}

TEST(TextTableDeathTest, RowOfTheWrongWidthIsABug) {
  TextTable table({{"A"}, {"B"}});
  EXPECT_DEATH(table.AddRow({"only one"}), "a table row of 1 cells for 2 columns");
}

}  // namespace
}  // namespace slimfit::client
