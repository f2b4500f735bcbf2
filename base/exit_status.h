// How every slimfit program ends: the exit status a result maps to, and the one-line error format.
// The `slimfit` CLI and both daemons follow it (README.md, "CLI reference").
//
// Exit statuses:
//   0  success
//   1  the request was understood but could not be carried out: nothing fits the memory budget
//      (RESOURCE_EXHAUSTED), a file could not be written, the coordinator cannot be reached
//      (UNAVAILABLE) or refuses in its current state (FAILED_PRECONDITION), a watched job FAILED or
//      was CANCELLED, a transfer did not match its SHA-256 (DATA_LOSS), a daemon could not start, …
//   2  usage or input error — something the caller must change before trying again: unknown
//      command or flag, a malformed or out-of-range value, a missing or unparsable input file, an
//      unknown job or worker id (INVALID_ARGUMENT, OUT_OF_RANGE, NOT_FOUND), a missing, wrong or
//      wrong-kind token or certificate (UNAUTHENTICATED, PERMISSION_DENIED)
//
// Thread safety: pure functions.
#ifndef SLIMFIT_BASE_EXIT_STATUS_H_
#define SLIMFIT_BASE_EXIT_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace slimfit::base {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// kExitOk for OK; kExitUsage for INVALID_ARGUMENT, OUT_OF_RANGE, NOT_FOUND, UNAUTHENTICATED and
// PERMISSION_DENIED; kExitFailure for every other code.
int ExitCodeForStatus(const absl::Status& status);

// "<program>: <message>\n" with every line break and tab in the message turned into a space, so an
// error is always exactly one line.
std::string FormatErrorLine(absl::string_view program, absl::string_view message);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_EXIT_STATUS_H_
