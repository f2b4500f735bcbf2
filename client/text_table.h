// Plain-text tables for the `slimfit` commands that list things (jobs, workers): a header row and
// one row per item, columns padded to their widest cell and separated by two spaces, without
// trailing spaces.
//
// Example:
//   TextTable table({{"ID"}, {"STATE"}, {"LOSS", TextTable::kRight}});
//   table.AddRow({"job-000017", "RUNNING", "2.3456"});
//   out << table.Render();
//   // ID          STATE      LOSS
//   // job-000017  RUNNING  2.3456
//
// Widths count bytes, so cells are expected to be ASCII (ids, numbers, state names).
// Thread safety: a TextTable is a plain value.
#ifndef SLIMFIT_CLIENT_TEXT_TABLE_H_
#define SLIMFIT_CLIENT_TEXT_TABLE_H_

#include <string>
#include <vector>

namespace slimfit::client {

class TextTable {
 public:
  enum Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = kLeft;
  };

  explicit TextTable(std::vector<Column> columns);

  // REQUIRES: cells.size() == the number of columns (a mismatch is a programming error: aborts).
  void AddRow(std::vector<std::string> cells);

  size_t rows() const { return rows_.size(); }

  // The header and every row, each line ending in '\n'.
  std::string Render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_TEXT_TABLE_H_
