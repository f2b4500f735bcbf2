// `slimfit export JOB --out FILE.safetensors [--round N]`: downloads a job's checkpoint
// (Coordinator.ExportModel, docs/PROTOCOL.md "Export") — by default the latest (the final one for a
// SUCCEEDED job) — as a safetensors file.
//
// The stream is an ExportHeader, chunks of 1..1 MiB, then an ExportTrailer{total_bytes, sha256}.
// The bytes go to a fresh temporary file FILE.tmp-XXXXXX (mkstemp, so concurrent exports never
// share one) while they are hashed; only when the byte count matches the header and the trailer
// and the SHA-256 matches the trailer is it renamed over FILE (atomically: FILE is never
// half-written, and an existing FILE is replaced only by a verified one). On any mismatch or a
// broken stream the temporary file is deleted; a mismatch or a stream out of protocol order is
// DATA_LOSS (exit status 1).
//
// Output: the path, the job, round and parameter version, the byte count and the SHA-256; --json:
// an object with keys path, job_id, round, parameter_version, bytes, sha256.
// Errors: NOT_FOUND for an unknown job or round; FAILED_PRECONDITION when the job has no checkpoint
// yet; DATA_LOSS as above; FAILED_PRECONDITION (exit status 1) with the errno's text when the
// local file cannot be created, written or renamed.
//
// Thread safety: runs on the caller's thread.
#ifndef SLIMFIT_CLIENT_EXPORT_COMMAND_H_
#define SLIMFIT_CLIENT_EXPORT_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace slimfit::client {

absl::Status RunExportCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_EXPORT_COMMAND_H_
