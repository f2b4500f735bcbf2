// Reference solvers for //planner:bptt_schedule's tests: the checkpoint programs' optimal costs
// computed independently of the library — by exhaustive search over the schedule machine, by the
// header's recurrences written out plainly, and by the seed paper's own programs (Gruslys et al.,
// "Memory-Efficient Backpropagation Through Time", 2016) — so the tests can compare the fast solver
// against all three.
//
// Thread safety: pure functions.
#ifndef SLIMFIT_PLANNER_BPTT_SCHEDULE_REFERENCES_H_
#define SLIMFIT_PLANNER_BPTT_SCHEDULE_REFERENCES_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "planner/bptt_schedule.h"

namespace slimfit::planner {

// "Cannot be done" in the reference tables.
inline constexpr int64_t kReferenceInf = std::numeric_limits<int64_t>::max() / 4;

// One program instance: kind plus, for MSM, the graph sizes.
struct Variant {
  ScheduleKind kind;
  double alpha;
  double beta;
};

std::string VariantName(const Variant& v);

// HSM, ISM, and MSM with α' = β' + 1 (the seed's usual case), β' < α' − 1, β' = α' (where the
// two-state refinement matters), α' = 1, and fractional sizes that round up.
const std::vector<Variant>& AllVariants();

// A 0-1 breadth-first search over every state (slices left, cursor, kept fronts, kept graphs) of
// the machine of bptt_schedule.h reachable by any valid action; forwards cost 1, everything else 0.
// Independent of the programs. kReferenceInf when t slices cannot be done in m slots.
int64_t ExhaustiveCost(const Variant& v, int t, int m);

// C[c][m][t] per the header's recurrences (c: start state), without hulls or pruning: O(t²·m).
std::vector<std::vector<std::vector<int64_t>>> ReferenceTables(const Variant& v, int tmax, int mmax);

// The seed's own programs, boundary conditions as printed: Algorithm 1 (HSM), eq. 4–5 (ISM),
// eq. 6–10 (MSM, one state). C[m][t].
std::vector<std::vector<int64_t>> SeedTables(const Variant& v, int tmax, int mmax);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_BPTT_SCHEDULE_REFERENCES_H_
