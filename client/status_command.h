// `slimfit status JOB`: one job (Coordinator.GetJob) — state and its reason, rounds completed of
// the total, the last round's loss and bits per byte, the latest held-out evaluation, tokens per
// second, the estimated time to finish, the latest checkpoint's round, token counts and times.
// --json prints the Job as proto3 JSON.
//
// Errors: NOT_FOUND for an unknown job (exit status 2); the coordinator's status otherwise.
//
// Thread safety: runs on the caller's thread.
#ifndef SLIMFIT_CLIENT_STATUS_COMMAND_H_
#define SLIMFIT_CLIENT_STATUS_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/slimfit.pb.h"

namespace slimfit::client {

// The text `slimfit status` prints for `job`: one "label  value" line per field.
std::string FormatJobStatus(const v1::Job& job);

absl::Status RunStatusCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_STATUS_COMMAND_H_
