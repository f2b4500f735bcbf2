// `slimfit plan`: what a device with a given memory can do — the plan (slice size C, prefix mode,
// front policy, …) the planner chooses for a Performer model and sequence, its predicted peak
// memory and time, the Pareto frontier of (memory, time) it chose from, and what ordinary
// back-propagation of the same Performer and a softmax transformer of the same shape would need.
// With --arch=transformer it prints the softmax-transformer baselines alone
// (client/transformer_plan_command.h).
//
//   slimfit calibrate --device=cpu --threads=2 --out=cpu.profile
//   slimfit plan --d_model=512 --layers=8 --heads=8 --seq_len=65536 --memory_budget=2GiB
//       --profile=cpu.profile
//
// The device comes from --profile=FILE (a text-format slimfit.v1.DeviceProfile, as written by
// `slimfit calibrate --out`), or is measured now with --device=cpu [--threads=N] through the
// DeviceCalibrator given to RunPlanCommand. --memory_budget defaults to the device's total memory
// when the profile knows it.
//
// With --worker=ID or --all, `slimfit plan` asks the coordinator instead
// (client/coordinator_plan_command.h); slimfit_main.cc dispatches on IsCoordinatorPlan.
//
// Thread safety: calls the calibrator (see device_calibrator.h); otherwise pure apart from
// reading the profile and writing to `out`.
#ifndef SLIMFIT_CLIENT_PLAN_COMMAND_H_
#define SLIMFIT_CLIENT_PLAN_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/device_calibrator.h"

namespace slimfit::client {

// Flags (--arch=performer, the default): model --d_model --layers --heads --d_ff --vocab
// --features=relu|elu+1|sqr|favor+ --feature_multiplier --ln=post|pre (defaults as ModelConfig);
// --seq_len (required), --documents (default 1); --memory_budget=SIZE (ParseByteSize syntax);
// --profile=FILE or --device=DEVICE [--threads=N] (exactly one of the two); --objective=time|memory;
// --dtype=float32|float64; --optimizer=none|adam (adam: two moments of the parameters' dtype on
// the device); --safety_margin (default 0.1: predicted peaks stay under 90% of the budget); --json.
// Text: the chosen plan, its reason, the frontier as a table, and the baselines. JSON: arch,
// model, workload {seq_len, documents, dtype, optimizer}, device {profile, source}, objective,
// memory_budget_bytes, safety_margin, chosen (PlanToJson keys), reason, frontier [plans],
// candidates_considered, baselines {full_backprop (a plan), softmax_transformer {batch, rows}}.
// Errors: INVALID_ARGUMENT for bad flags, model or profile (NOT_FOUND for a missing profile file);
// RESOURCE_EXHAUSTED "no plan fits: <what the least plan needs>" when nothing fits the budget;
// the calibrator's errors.
absl::Status RunPlanCommand(absl::Span<const std::string> args, std::ostream& out,
                            const DeviceCalibrator& calibrate);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_PLAN_COMMAND_H_
