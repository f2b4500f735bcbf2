// Optimal checkpoint schedules for the backward sweep over slices: the dynamic programs BPTT-HSM,
// BPTT-ISM and BPTT-MSM of Gruslys et al. 2016 ("Memory-Efficient Backpropagation Through Time"),
// and a generator that turns an optimal policy into the flat list of actions the engine's `dp`
// front policy executes (performer::Schedule, performer/checkpoint_schedule.h).
//
// Example: back-propagate through 1000 slices keeping at most 8 fronts.
//   absl::StatusOr<Schedule> schedule = MakeSchedule(ScheduleKind::kHsm, /*steps=*/1000,
//                                                    /*slots=*/8, /*alpha=*/0, /*beta=*/0);
//   if (!schedule.ok()) return schedule.status();
//   for (const ScheduleAction& action : schedule->actions) {
//     switch (action.type) {
//       case ScheduleAction::Type::kForward: ...           // cursor = RunSlice(index, cursor)
//       case ScheduleAction::Type::kForwardKeepGraph: ...  // graphs[index] = RunSliceWithGraph(..)
//       ...                          // one case per type: performer/checkpoint_schedule.h
//     }
//   }
//   // schedule->forward_count slice forwards were run: 5 285 here, against 1 000 for ordinary
//   // BPTT, which holds all 1 000 slice graphs at once, and 1 999 with 1 000 fronts kept.
// Many queries (a plan search over slice sizes and budgets): build one BpttPolicy for the largest
// (steps, slots) and ask it; every smaller query is then a table lookup.
//
// The machine the schedules run on, its memory units, the cost convention C(t, m) and what each
// action does are defined in performer/checkpoint_schedule.h (the engine executes schedules; this
// file chooses them). Seed costs: HSM C(t,1) = t(t+1)/2 and C(t,m) = 2t−1 for m ≥ t; ISM
// C(t,1) = t(t+1)/2 and C(t,m) = t for m ≥ t; MSM C(t,1) = t(t+1)/2 and C(t,m) = t for m ≥ αt.
//
// ---- The programs -------------------------------------------------------------------------------
// Divide and conquer over a stretch of t slices whose start front is held, with budget m in the
// kind's units (for HSM and MSM m includes the unit holding the stretch's start front, as in the
// seed):
//   tail       forward t−1 slices, build the last slice's graph in the working core, back-propagate
//              it, then solve the first t−1 slices: t + C(t−1, m)           (kIsm: 1 slot for it)
//   front(y)   (HSM, MSM; seed eq. 1–3) forward y slices, keep the front, solve the right part
//              with m−1, then the left part with m: y + C(t−y, m−1) + C(y, m), 1 ≤ y < t
//   graph(y)   (ISM, MSM; seed eq. 4–10) forward y−1 slices, keep slice y's graph, solve the right
//              part (its start is the graph's output), back-propagate the graph, then the first
//              y−1 slices: y + C(y−1, m) + C(t−y, m − g(y)), 1 ≤ y < t
// with C(0, ·) = 0 and C(t ≥ 1, m ≤ 0) = ∞; kIsm: g = 1; kMsm: g(y ≥ 2) = α', g(1) = β' (seed
// eq. 10). One refinement over the seed for kMsm: when the start front is a kept front (not the
// output of a kept graph), graph(1) may instead drop that front and keep the graph with its own
// copy of the input, costing α' − 1 beyond the front it replaces, so g(1) = min(β', α' − 1) there.
// The program therefore tracks two start states when β' > α' − 1; when β' ≤ α' − 1 (the seed's
// usual α = β + 1) both states coincide and the program is exactly the seed's eq. 10. The seed's
// boundary conditions follow from these cases (for MSM with α ≥ 2, which the seed assumes; with
// α' = 1 one slot does better than t(t+1)/2). The optimum of this program equals that of an
// exhaustive search over every valid action sequence of the machine above (tested for t ≤ 7,
// m ≤ 5, all three kinds and several α, β).
//
// Complexity: the tables have (T+1)·m_eff·s cells, s ∈ {1, 2} start states, m_eff = min(m, the
// budget beyond which C no longer falls: T for HSM/ISM, 1 + (T−1)·β' for MSM); 8 bytes per cell
// (cost and decision), plus, while solving, the lower convex hull of each row. Each cell
// minimises over its split y exactly, by branch and bound rather than a scan of every y: the
// rows' lower convex hulls bound every split from below; the split minimising that bound is found
// by a galloping search from the previous cell's, and only splits whose bound is below the best
// cost found are evaluated. C(·, m) is convex in t for HSM (the seed's Appendix A remark) and, as
// measured, for ISM, and stays within one unit of its hull for MSM, so one split is evaluated per
// cell for HSM/ISM and about four for MSM: time O(T·m_eff·log T) in practice. Correctness does
// not rest on convexity; a row far from convex would only slow a cell towards O(T), O(T²·m_eff)
// in all. Measured (one core, -O2): T = 16384 with m = 16 / 128 solves in 0.01 / 0.07 s (HSM,
// ISM) and 0.02–0.04 / 0.17–0.32 s (MSM); a table at kMaxPolicyTableCells in about 1.2 s.
//
// Thread safety: every function here is pure; a BpttPolicy is immutable after Create and its const
// methods may be called concurrently; copies share the tables.
#ifndef SLIMFIT_PLANNER_BPTT_SCHEDULE_H_
#define SLIMFIT_PLANNER_BPTT_SCHEDULE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "performer/checkpoint_schedule.h"
#include "performer/plan.h"

namespace slimfit::planner {

// The schedule representation is the engine's (performer/checkpoint_schedule.h).
using performer::kMaxScheduleActions;
using performer::kMaxScheduleSlots;
using performer::kMaxScheduleSteps;
using performer::ParseScheduleKind;
using performer::Schedule;
using performer::ScheduleAction;
using performer::ScheduleActionToString;
using performer::ScheduleActionTypeName;
using performer::ScheduleKind;
using performer::ScheduleKindName;
using performer::ScheduleStats;
using performer::SimulateSchedule;

// (T+1)·m_eff·s cells per policy table (see Complexity above); RESOURCE_EXHAUSTED beyond.
inline constexpr int64_t kMaxPolicyTableCells = int64_t{1} << 24;

// Optimal costs and policies for every 1 ≤ t ≤ max_steps and 1 ≤ m ≤ max_slots of one kind (and,
// for kMsm, one α, β). Immutable; thread-safe; cheap to copy (copies share the tables).
class BpttPolicy {
 public:
  // Solves the program once (see Complexity). `alpha` and `beta` are read for kMsm only.
  // INVALID_ARGUMENT: max_steps outside [1, kMaxScheduleSteps], max_slots outside
  //   [1, kMaxScheduleSlots], or (kMsm) alpha not finite or < 1, beta not finite, ≤ 0 or > alpha.
  // RESOURCE_EXHAUSTED: the table would exceed kMaxPolicyTableCells.
  static absl::StatusOr<BpttPolicy> Create(ScheduleKind kind, int64_t max_steps, int64_t max_slots,
                                           double alpha, double beta);

  // C(steps, slots): see Cost convention.
  // INVALID_ARGUMENT: steps < 1 or slots < 1. OUT_OF_RANGE: steps > max_steps() or
  // slots > max_slots().
  absl::StatusOr<int64_t> Cost(int64_t steps, int64_t slots) const;

  // The fewest slots in [1, max_slots()] whose optimal cost for `steps` is ≤ max_forwards.
  // INVALID_ARGUMENT / OUT_OF_RANGE: as Cost for `steps`. NOT_FOUND: even max_slots() slots need
  // more forwards (the message says how many).
  absl::StatusOr<int64_t> SlotsForCost(int64_t steps, int64_t max_forwards) const;

  // An optimal schedule for `steps` slices under `slots` units.
  // INVALID_ARGUMENT / OUT_OF_RANGE: as Cost. RESOURCE_EXHAUSTED: more than kMaxScheduleActions
  // actions (a tiny budget on a long sequence: C grows as steps²/2 with one slot).
  absl::StatusOr<Schedule> MakeSchedule(int64_t steps, int64_t slots) const;

  ScheduleKind kind() const;
  int64_t max_steps() const;
  int64_t max_slots() const;
  double alpha() const;
  double beta() const;

 private:
  struct Tables;  // defined in bptt_schedule.cc
  explicit BpttPolicy(std::shared_ptr<const Tables> tables);
  std::shared_ptr<const Tables> tables_;
};

// One-off forms of BpttPolicy::Create(kind, steps, slots, alpha, beta) followed by
// Cost(steps, slots) / MakeSchedule(steps, slots); same errors. Each call solves the program
// afresh.
absl::StatusOr<int64_t> OptimalCost(ScheduleKind kind, int64_t steps, int64_t slots, double alpha,
                                    double beta);
absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int64_t steps, int64_t slots, double alpha,
                                      double beta);

// The schedule a `dp` plan runs over `slices` slices: MakeSchedule(plan.schedule, slices,
// plan.slots, plan.alpha, plan.beta). This is what the engine is given as
// performer::GradientOptions::dp_schedule. Same errors as MakeSchedule; INVALID_ARGUMENT when the
// plan's front policy is not dp.
absl::StatusOr<Schedule> ScheduleForPlan(const performer::Plan& plan, int64_t slices);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_BPTT_SCHEDULE_H_
