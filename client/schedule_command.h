// `slimfit schedule`: the optimal BPTT checkpoint schedule of Gruslys et al. (2016) for back-propagating
// through T slices with at most M memory slots (planner/bptt_schedule.h) — its cost, its overhead over
// ordinary BPTT, the most fronts and slice graphs it keeps at once, and optionally its actions.
//
//   slimfit schedule --steps=1000 --slots=8 --kind=hsm
//   schedule        hsm, T = 1000 slices, M = 8 slots
//   cost C(T,M)     5285 slice forwards
//   ...
//
// Costs follow bptt_schedule.h's convention: C(T, M) counts every slice forward, the first sweep
// included, so ordinary BPTT (every slice graph kept) costs T and the recomputation overhead is
// C − T. The peaks come from replaying the schedule with SimulateSchedule. A schedule longer than
// kMaxScheduleActions cannot be generated: without --actions the cost is still printed and the
// peaks are reported as unknown ("-", JSON null); with --actions that is a RESOURCE_EXHAUSTED
// error.
//
// Thread safety: pure apart from writing to `out`.
#ifndef SLIMFIT_CLIENT_SCHEDULE_COMMAND_H_
#define SLIMFIT_CLIENT_SCHEDULE_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace slimfit::client {

// Flags: --steps=T (required), --slots=M (required), --kind=hsm|ism|msm (default hsm),
// --alpha=A --beta=B (--kind=msm only: slice-graph sizes in fronts, see bptt_schedule.h),
// --actions (list the actions), --json.
// JSON (one object): kind, steps, slots, [alpha, beta for msm], cost, bptt_cost (= steps),
// overhead (= cost − steps), overhead_fraction, peak_kept_fronts, peak_kept_graphs, peak_units,
// action_count (the last four null when the schedule is too long to generate), and with --actions
// "actions": ["forward(0)", "keep_front(1)", …].
// Errors: INVALID_ARGUMENT for bad flags (--alpha/--beta without --kind=msm included); the
// planner's errors as they are (INVALID_ARGUMENT, OUT_OF_RANGE, RESOURCE_EXHAUSTED).
absl::Status RunScheduleCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_SCHEDULE_COMMAND_H_
