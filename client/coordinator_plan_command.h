// `slimfit plan --worker=ID | --all`: what the coordinator's planner chooses for one registered
// worker, or for every live one, with that worker's own calibrated profile and memory budget
// (Coordinator.GetMemoryPlan). The workload is a job's (--job=ID: its model, L, dtype and
// documents per sequence) or a model spec: the model flags of the offline `slimfit plan`
// (--d_model --layers --heads --d_ff --vocab --features --feature_multiplier --ln) with --seq_len
// and --documents.
//
//   slimfit plan --all --job=job-000017
//   slimfit plan --worker=w-3f2a --d_model=512 --layers=8 --heads=8 --seq_len=65536
//
// `slimfit plan` without --worker or --all is the offline planner (client/plan_command.h); the
// offline-only flags (--arch, --profile, --device, --threads, --memory_budget, --optimizer) are
// refused here with a message saying why.
//
// Text, per worker: the budget and what it allows after the safety margin; the chosen plan
// (PlanSummary), its predicted peak and time and the planner's reason; ordinary full
// back-propagation's peak and time and whether it fits; the Pareto frontier when the coordinator
// sent one (--frontier); or, when nothing fits, the refusal line. --json: the
// GetMemoryPlanResponse (every page) as proto3 JSON.
// Outcome: with --all a refusal is an answer like any other (exit status 0); with --worker it is
// RESOURCE_EXHAUSTED "worker ID: no plan fits: <refusal>" (exit status 1), as the offline plan.
// Errors: INVALID_ARGUMENT for bad or conflicting flags; NOT_FOUND for an unknown worker or job;
// FAILED_PRECONDITION for a LOST worker; the coordinator's status otherwise.
//
// Thread safety: runs on the caller's thread.
#ifndef SLIMFIT_CLIENT_COORDINATOR_PLAN_COMMAND_H_
#define SLIMFIT_CLIENT_COORDINATOR_PLAN_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/slimfit.pb.h"

namespace slimfit::client {

// Whether `args` (after `plan`) ask for the coordinator's plans: --worker or --all in any form
// (--worker=ID, --worker ID, --all, --all=true; not --noall or --all=false).
bool IsCoordinatorPlan(absl::Span<const std::string> args);

// The text printed for one worker's MemoryPlan.
std::string FormatMemoryPlan(const v1::MemoryPlan& plan);

absl::Status RunCoordinatorPlanCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_COORDINATOR_PLAN_COMMAND_H_
