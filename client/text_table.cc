#include "client/text_table.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace slimfit::client {

TextTable::TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}

void TextTable::AddRow(std::vector<std::string> cells) {
  if (cells.size() != columns_.size()) {
    std::fprintf(stderr, "slimfit: internal error: a table row of %zu cells for %zu columns\n", cells.size(),
                 columns_.size());
    std::abort();
  }
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render() const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = columns_[c].header.size();
    for (const std::vector<std::string>& row : rows_) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string text;
  auto render_line = [&](auto cell_of) {
    std::string line;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const std::string& cell = cell_of(c);
      const std::string padding(widths[c] - cell.size(), ' ');
      if (c > 0) line += "  ";
      line += columns_[c].align == kRight ? padding + cell : cell + padding;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    text += line;
    text += '\n';
  };
  render_line([&](size_t c) -> const std::string& { return columns_[c].header; });
  for (const std::vector<std::string>& row : rows_) {
    render_line([&](size_t c) -> const std::string& { return row[c]; });
  }
  return text;
}

}  // namespace slimfit::client
