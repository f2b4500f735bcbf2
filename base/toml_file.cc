#include "base/toml_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/files.h"

namespace slimfit::base {
namespace {

// The shortest decimal form of `value` that reads back as the same double.
std::string ShortestText(double value) {
  for (int digits = 1; digits < 17; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

absl::StatusOr<std::string> ValueText(const std::string& path, const std::string& key,
                                      const toml::node& node) {
  if (const auto* text = node.as_string()) return text->get();
  if (const auto* integer = node.as_integer()) return absl::StrCat(integer->get());
  if (const auto* real = node.as_floating_point()) return ShortestText(real->get());
  if (const auto* boolean = node.as_boolean()) return std::string(boolean->get() ? "true" : "false");
  if (const auto* array = node.as_array()) {
    std::vector<std::string> items;
    for (const toml::node& item : *array) {
      const auto* text = item.as_string();
      if (text == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": a list holds strings only"));
      }
      items.push_back(text->get());
    }
    return absl::StrJoin(items, ",");
  }
  if (node.is_table()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", key, ": tables are not flags; write every key at the top of the file"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", key, ": expected a string, number, boolean or list of strings"));
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadFlatToml(const std::string& path) {
  absl::StatusOr<std::string> content = ReadFileToString(path);
  if (!content.ok()) return content.status();
  toml::table table;
  try {
    table = toml::parse(*content, path);
  } catch (const toml::parse_error& error) {
    const toml::source_position at = error.source().begin;
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", at.line, ":", at.column, ": ", std::string(error.description())));
  }
  // toml++ keeps keys sorted; report them in file order so messages follow the file.
  std::vector<std::pair<toml::source_position, std::pair<std::string, std::string>>> entries;
  for (const auto& [key, node] : table) {
    absl::StatusOr<std::string> text = ValueText(path, std::string(key.str()), node);
    if (!text.ok()) return text.status();
    entries.push_back({key.source().begin, {std::string(key.str()), *std::move(text)}});
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.first.line, a.first.column) < std::make_pair(b.first.line, b.first.column);
  });
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& entry : entries) out.push_back(std::move(entry.second));
  return out;
}

}  // namespace slimfit::base
