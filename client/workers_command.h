// `slimfit workers [--all]`: the coordinator's workers (Coordinator.ListWorkers, every page) as a
// table: id, device, memory budget, state, and for each running job it serves the plan (slice C
// and policies, planner::PlanSummary) with the predicted and the last measured tokens per second,
// and the age of the last heartbeat. A worker serving several jobs takes one row per job. Below the
// table, one line per revoked worker and per quarantine (job, reason). --all includes LOST, LEFT and
// REVOKED workers. --json prints a ListWorkersResponse holding every worker.
//
// `slimfit workers revoke ID [--reason=TEXT]`: revokes a worker (Coordinator.RevokeWorker): its
// calls are refused from now on, its shards go to others, and it can never register again with its
// credential. Prints the revoked worker (--json: its WorkerInfo).
//
// Thread safety: runs on the caller's thread (reads the clock for heartbeat ages).
#ifndef SLIMFIT_CLIENT_WORKERS_COMMAND_H_
#define SLIMFIT_CLIENT_WORKERS_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/slimfit.pb.h"

namespace slimfit::client {

// The table `slimfit workers` prints, with heartbeat ages relative to `now`.
std::string FormatWorkersTable(const v1::ListWorkersResponse& workers, absl::Time now);

absl::Status RunWorkersCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_WORKERS_COMMAND_H_
