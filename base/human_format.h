// Numbers and durations as people read them in tables, logs and pages: "12m 03s", "12.3k tokens/s",
// "1,234,567". Used by the CLI's service commands and the coordinator's status page.
//
// Thread safety: pure functions.
#ifndef SLIMFIT_BASE_HUMAN_FORMAT_H_
#define SLIMFIT_BASE_HUMAN_FORMAT_H_

#include <cstdint>
#include <string>

namespace slimfit::base {

// "45s", "12m 03s", "3h 04m", "2d 03h"; "-" for a negative or non-finite value.
std::string FormatDuration(double seconds);
// "950 tokens/s", "12.3k tokens/s", "4.56M tokens/s"; "-" for a negative or non-finite value.
std::string FormatRate(double tokens_per_second);
// 1234567 → "1,234,567".
std::string FormatCount(int64_t count);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_HUMAN_FORMAT_H_
