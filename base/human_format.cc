#include "base/human_format.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace slimfit::base {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t whole = static_cast<int64_t>(std::llround(seconds));
  if (whole < 60) return absl::StrCat(whole, "s");
  if (whole < 3600) return absl::StrFormat("%dm %02ds", whole / 60, whole % 60);
  if (whole < 86400) return absl::StrFormat("%dh %02dm", whole / 3600, whole % 3600 / 60);
  return absl::StrFormat("%dd %02dh", whole / 86400, whole % 86400 / 3600);
}

std::string FormatRate(double tokens_per_second) {
  if (!std::isfinite(tokens_per_second) || tokens_per_second < 0) return "-";
  // Three significant digits without printf's exponent form.
  auto significant = [](double x) {
    return x < 10    ? absl::StrFormat("%.2f", x)
           : x < 100 ? absl::StrFormat("%.1f", x)
                     : absl::StrFormat("%.0f", x);
  };
  if (tokens_per_second < 1e3) return absl::StrFormat("%.0f tokens/s", tokens_per_second);
  if (tokens_per_second < 1e6) return absl::StrCat(significant(tokens_per_second / 1e3), "k tokens/s");
  return absl::StrCat(significant(tokens_per_second / 1e6), "M tokens/s");
}

std::string FormatCount(int64_t count) {
  const uint64_t magnitude = count < 0 ? 0 - static_cast<uint64_t>(count) : static_cast<uint64_t>(count);
  const std::string digits = absl::StrCat(magnitude);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped.push_back(',');
    grouped.push_back(digits[i]);
  }
  return count < 0 ? absl::StrCat("-", grouped) : grouped;
}

}  // namespace slimfit::base
