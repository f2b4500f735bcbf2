// Internal to //performer:gradient_engine: the two drivers of the sliced algorithm, both made of a
// SliceRunner's pieces (slice_runner.h). ComputeGradient picks one by the plan's front policy.
//
// Thread safety: as SliceRunner.
#ifndef SLIMFIT_PERFORMER_SLICED_GRADIENT_H_
#define SLIMFIT_PERFORMER_SLICED_GRADIENT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "performer/checkpoint_schedule.h"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "performer/slice_graphs.h"
#include "performer/slice_runner.h"

namespace slimfit::performer::internal {

// The SLiM paper's Algorithms 1–2 (Likhosherstov et al.): a forward sweep keeping fronts, then a
// backward sweep that obtains each U(n−1) by subtraction (reverse), from a kept front (store,
// resync) — and from a kept front wherever a document starts, under every policy.
// `graphs` (may be null) replays the slices it can (slice_graphs.h).
// REQUIRES: plan.front_policy is kReverse, kStore or kResync.
void SweepGradient(SliceRunner& runner, SliceGraphs* graphs, const Plan& plan, const ModelConfig& c,
                   int64_t* stored_fronts_peak);

// The dp front policy: runs `schedule` (checkpoint_schedule.h) action by action. Fronts are never
// recovered by subtraction, so the result is exact whatever N.
// REQUIRES: SimulateSchedule(schedule, runner.slices(), schedule.slots) is OK. INTERNAL if an
// action still cannot run (a bug).
absl::Status ScheduledGradient(SliceRunner& runner, SliceGraphs* graphs, const Schedule& schedule,
                               int64_t* stored_fronts_peak);

}  // namespace slimfit::performer::internal

#endif  // SLIMFIT_PERFORMER_SLICED_GRADIENT_H_
