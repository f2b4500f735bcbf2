// `slimfit cancel JOB [--reason TEXT]`: cancels a QUEUED or RUNNING job (Coordinator.CancelJob);
// in-flight shards are cancelled and the last checkpoint stays exportable. Idempotent: cancelling a
// cancelled job reports it again. Prints the job's summary line, or with --json the Job.
//
// Errors: NOT_FOUND for an unknown job (exit status 2); FAILED_PRECONDITION for a job that already
// SUCCEEDED or FAILED (exit status 1).
//
// Thread safety: runs on the caller's thread.
#ifndef SLIMFIT_CLIENT_CANCEL_COMMAND_H_
#define SLIMFIT_CLIENT_CANCEL_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace slimfit::client {

absl::Status RunCancelCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_CANCEL_COMMAND_H_
