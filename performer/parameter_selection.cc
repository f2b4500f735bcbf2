#include "performer/parameter_selection.h"

#include <cstddef>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace slimfit::performer {

bool MatchesPattern(absl::string_view pattern, absl::string_view name) {
  // Greedy matching with one back-tracking point (the last '*'): linear in practice.
  size_t p = 0, n = 0, star = absl::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

absl::StatusOr<std::vector<int>> SelectParameters(const std::vector<std::string>& names,
                                                  absl::string_view patterns, absl::string_view field) {
  std::vector<int> selected;
  if (patterns.empty()) {
    for (size_t i = 0; i < names.size(); ++i) selected.push_back(static_cast<int>(i));
    return selected;
  }
  std::vector<bool> chosen(names.size(), false);
  for (absl::string_view pattern : absl::StrSplit(patterns, ',')) {
    pattern = absl::StripAsciiWhitespace(pattern);
    if (pattern.empty())
      return absl::InvalidArgumentError(absl::StrCat(field, ": an empty pattern in '", patterns, "'"));
    bool any = false;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!MatchesPattern(pattern, names[i])) continue;
      chosen[i] = true;
      any = true;
    }
    if (!any) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": '", pattern, "' matches no parameter; the model's are ", absl::StrJoin(names, ", ")));
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (chosen[i]) selected.push_back(static_cast<int>(i));
  }
  return selected;
}

}  // namespace slimfit::performer
