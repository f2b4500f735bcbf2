// `slimfit jobs [--state=running,queued] [--limit=N]`: the coordinator's jobs, newest first
// (Coordinator.ListJobs, following next_page_token), as a table: id, name, state, rounds completed
// of the total, last loss, bits per byte, created. --limit caps how many (default 50; 0: all).
// --json prints a ListJobsResponse holding every job listed (next_page_token set when --limit cut
// the listing short).
//
// Errors: INVALID_ARGUMENT for an unknown state or a negative limit; the coordinator's status.
//
// Thread safety: runs on the caller's thread.
#ifndef SLIMFIT_CLIENT_JOBS_COMMAND_H_
#define SLIMFIT_CLIENT_JOBS_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace slimfit::client {

absl::Status RunJobsCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_JOBS_COMMAND_H_
