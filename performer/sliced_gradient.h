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

// What a sweep did to stay precise (GradientResult::conditioning_fronts, _recomputed, _forwards).
struct ConditioningCounts {
  int64_t kept = 0;        // fronts kept because their subtraction would have lost precision
  int64_t recomputed = 0;  // such fronts recomputed instead: kMaxConditioningFronts were kept already
  // Slice forwards this cost beyond the sweeps' 2N − 1: stretches swept again slice by slice (their
  // first sweep, and the stretch swept after one before its check came back) and recomputations.
  int64_t forwards = 0;
};

// The SLiM paper's Algorithms 1–2 (Likhosherstov et al.): a forward sweep keeping fronts, then a
// backward sweep that obtains each U(n−1) by subtraction (reverse), from a kept front (store,
// resync) — and from a kept front wherever a document starts, under every policy.
//
// Conditioning (reverse, resync): a front rebuilt by subtractions that start from a front U(m)
// carries U(m)'s rounding, about ε·Z(m) in each denominator component (ε the dtype's unit
// roundoff). Features are non-negative, so within a document the denominators only grow, and a
// front whose components are far below Z(m)'s is rebuilt as noise: relu features whose first keys
// are near zero made `reverse` 38% off in float32 (BENCHMARKS.md, "How close are sliced gradients to
// full back-propagation?"). So
// the forward sweep bounds, for every run of fronts that will be rebuilt from the same front, how
// far each denominator component Z_f grows past the run's first front — a query's denominator
// φ(q)·Z grows by at most the largest such ratio, whichever features it weighs: where a stretch
// would take one past 256× (8 bits: 2⁻¹⁵ relative in float32), the front entering the stretch is
// kept (a stretch that grew that much by itself is swept again slice by slice to place the keep
// exactly). At most
// kMaxConditioningFronts such fronts per call; past them, the backward sweep recomputes each front
// that needs it by a forward from the nearest exact front below (time instead of memory: the
// gradient stays precise). `conditioning` counts both.
// `graphs` (may be null) replays the slices it can (slice_graphs.h).
// REQUIRES: plan.front_policy is kReverse, kStore or kResync.
void SweepGradient(SliceRunner& runner, SliceGraphs* graphs, const Plan& plan, const ModelConfig& c,
                   int64_t* stored_fronts_peak, ConditioningCounts* conditioning);

// The dp front policy: runs `schedule` (checkpoint_schedule.h) action by action. Fronts are never
// recovered by subtraction, so the result is exact whatever N.
// REQUIRES: SimulateSchedule(schedule, runner.slices(), schedule.slots) is OK. INTERNAL if an
// action still cannot run (a bug).
absl::Status ScheduledGradient(SliceRunner& runner, SliceGraphs* graphs, const Schedule& schedule,
                               int64_t* stored_fronts_peak);

}  // namespace slimfit::performer::internal

#endif  // SLIMFIT_PERFORMER_SLICED_GRADIENT_H_
