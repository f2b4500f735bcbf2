// How many slices the engine's forward sweep runs as one stretch — without LibTorch, so the engine
// (performer/sliced_gradient.cc) and the planner's cost model (planner/cost_model.h,
// SweepSlicesPerStretch), which counts the stretch's memory and time, share one rule.
//
// Thread safety: constants.
#ifndef SLIMFIT_PERFORMER_SWEEP_STRETCH_RULE_H_
#define SLIMFIT_PERFORMER_SWEEP_STRETCH_RULE_H_

#include <cstdint>

namespace slimfit::performer {

// The most slices a forward sweep runs as one stretch where no front inside it is needed: the same
// arithmetic in fewer, larger matrix products. A graph-free forward holds about a third of what a
// slice graph holds per token, so this many slices cost about the memory of one slice's graph.
// Fewer where fronts are kept inside (store, resync every r < 3, document starts) and 1 for relu's
// onset bookkeeping, which needs every slice boundary.
inline constexpr int64_t kSweepSlices = 3;

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_SWEEP_STRETCH_RULE_H_
