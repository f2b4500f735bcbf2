// `slimfit watch JOB`: follows a job with Coordinator.WatchJob until it ends.
//
//   slimfit watch job-000017
//   watching job-000017 "tiny": RUNNING, round 14/200, loss 2.3456 (3.384 bits/byte), ...
//   round 15/200  loss 2.3311  3.363 bits/byte  12.3k tokens/s  ETA 1h 02m
//   evaluation after round 15: loss 2.4102, 3.477 bits/byte (65,536 held-out tokens)
//   ...
//   state RUNNING -> SUCCEEDED
//
// Text: the snapshot as a job summary, then one line per event — completed rounds (the progress
// line: redrawn in place with '\r' when stdout is a terminal, one line per round otherwise),
// evaluations, checkpoints, plan changes, reassigned shards and state changes. --json: every
// JobEvent as one line of proto3 JSON (JSON lines), snapshots included.
//
// Outcome: OK when the job SUCCEEDED; when it FAILED, ABORTED "job-… FAILED: <reason>"; when it was
// CANCELLED, CANCELLED "job-… CANCELLED: <reason>" (both exit status 1). A stream that breaks with
// UNAVAILABLE after the first event (the coordinator restarting) is reopened with back-off
// (0.1 s doubling to 5 s) with after_sequence = the last event seen, so no event is shown twice or
// lost while the coordinator retains it; after --reconnect_seconds without a working stream it
// gives up with UNAVAILABLE. A first call that fails is not retried (an unknown job is NOT_FOUND,
// an unreachable coordinator UNAVAILABLE naming the address).
//
// Thread safety: runs on the caller's thread; writes to `out` (flushing after each event).
#ifndef SLIMFIT_CLIENT_WATCH_COMMAND_H_
#define SLIMFIT_CLIENT_WATCH_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/flags.h"
#include "client/coordinator_client.h"

namespace slimfit::client {

struct WatchOptions {
  bool json = false;      // JSON lines instead of text
  bool terminal = false;  // stdout is a terminal: redraw the progress line in place
  // How long to keep reopening a broken stream before giving up.
  absl::Duration reconnect = absl::Seconds(60);
  // Every retained event of the job from its first, after the snapshot, instead of only those
  // that follow it (a job watched after it started, or after it ended).
  bool from_start = false;
};

// Registers --reconnect_seconds writing to `*seconds` (default 60). For `watch` and `submit --watch`.
void AddReconnectFlag(base::FlagSet& flags, double* seconds);
// INVALID_ARGUMENT unless 0 ≤ seconds ≤ one day.
absl::StatusOr<absl::Duration> ReconnectDuration(double seconds);

// Follows `job_id` as described above, writing to `out` as events arrive.
absl::Status WatchJob(const CoordinatorClient& client, const std::string& job_id, const WatchOptions& options,
                      std::ostream& out);

// The command: `slimfit watch JOB [--reconnect_seconds=S] [coordinator flags]`. `terminal`: stdout
// is a terminal (isatty). Writes as it goes (Command::streams_output).
absl::Status RunWatchCommand(absl::Span<const std::string> args, std::ostream& out, bool terminal);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_WATCH_COMMAND_H_
