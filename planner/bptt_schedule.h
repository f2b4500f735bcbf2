// Optimal checkpoint schedules for the backward sweep over slices: the dynamic programs BPTT-HSM,
// BPTT-ISM and BPTT-MSM of seeds/002 (Gruslys et al. 2016, "Memory-Efficient Backpropagation
// Through Time"), a generator that turns an optimal policy into a flat list of actions an engine
// runs one after another, and a simulator that replays such a list on an abstract machine, checks
// it and counts its work. The `dp` front policy (DESIGN.md) executes these schedules.
//
// Example: back-propagate through 1000 slices keeping at most 8 fronts.
//   absl::StatusOr<Schedule> schedule = MakeSchedule(ScheduleKind::kHsm, /*steps=*/1000,
//                                                    /*slots=*/8, /*alpha=*/0, /*beta=*/0);
//   if (!schedule.ok()) return schedule.status();
//   for (const ScheduleAction& action : schedule->actions) {
//     switch (action.type) {
//       case ScheduleAction::Type::kForward: ...           // cursor = RunSlice(index, cursor)
//       case ScheduleAction::Type::kForwardKeepGraph: ...  // graphs[index] = RunSliceWithGraph(..)
//       ...                                                // one case per type, see below
//     }
//   }
//   // schedule->forward_count slice forwards were run: 5 285 here, against 1 000 for ordinary
//   // BPTT, which holds all 1 000 slice graphs at once, and 1 999 with 1 000 fronts kept.
// Many queries (a plan search over slice sizes and budgets): build one BpttPolicy for the largest
// (steps, slots) and ask it; every smaller query is then a table lookup.
//
// ---- The machine --------------------------------------------------------------------------------
// Slices 0..T−1. Front f_i is the recurrent state entering slice i: f_0 is the initial front, slice
// i maps f_i to f_{i+1}. (In seeds/002 a slice is a time step, a front is a hidden state, a slice
// graph is an "internal RNN core state".) The executor holds
//   - the cursor: one working front, initially f_0; it is not charged against the budget;
//   - kept fronts, keyed by position p;
//   - kept graphs, keyed by slice i: slice i's autograd graph together with its input f_i and its
//     output f_{i+1}, both of which can be read back;
//   - (HSM, MSM) a working core with room for one transient graph, not charged (seed §3.1: "a
//     single RNN core available for the purposes of intermediate calculations").
// Slice i can be back-propagated once slice i+1 has been (order T−1, T−2, ..., 0), and needs the
// graph of slice i: either kept, or built in the working core from the cursor right before.
//
// Memory units and what `slots` (the budget m) counts, per kind:
//   kHsm  a kept front costs 1; graphs are never kept. f_0 must be kept like any other front to be
//         read back. Seed: C(t,1) = t(t+1)/2 and C(t,m) = 2t−1 for m ≥ t.
//   kIsm  a kept graph costs 1; fronts are never kept; f_0 can always be read back for free.
//         There is no working core: kForwardBackward needs one free slot for its moment. Seed:
//         C(t,1) = t(t+1)/2 and C(t,m) = t for m ≥ t.
//   kMsm  units of one front (α ≥ 1, 0 < β ≤ α, seed §3.3–3.4). A kept front costs 1. A kept graph
//         of slice i costs β' = ceil(β) while f_i is otherwise held (kept front i, or kept graph
//         i−1 whose output is f_i), and α' = ceil(α) otherwise — α is the size of a slice graph
//         including its input front, β its size when that front is stored anyway (often α − 1).
//         Charges follow the state: freeing front i turns a kept graph i from β' to α'. Seed:
//         C(t,1) = t(t+1)/2 and C(t,m) = t for m ≥ αt. α and β may be fractional (a planner's
//         bytes(graph) / bytes(front)); they are rounded up, so the budget is never exceeded.
// At every moment the charged units must be ≤ slots.
//
// ---- Cost convention ----------------------------------------------------------------------------
// C(t, m) — OptimalCost, Schedule::forward_count, ScheduleStats::forward_count — counts every slice
// forward the schedule runs: the first pass over the sequence included, and every forward that
// rebuilds a slice's graph right before its backward (kForwardBackward). Backward passes are not
// counted: there are always exactly t. Ordinary BPTT (all t graphs kept) costs t,
// so the recomputation overhead is C(t, m) − t. This is the C(t, m) of seeds/002 eq. 1–10.
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
// ---- Executing a schedule -----------------------------------------------------------------------
// Keep a cursor front, a map position → kept front and a map slice → kept graph; run the actions in
// order. Every action is valid in the state the previous ones leave (SimulateSchedule checks this):
//   kForward(i)          (+1 forward) cursor is f_i; run slice i without a graph; cursor = f_{i+1}.
//   kForwardKeepGraph(i) (+1 forward) cursor is f_i; run slice i building its graph and keep the
//                        graph (with f_i and f_{i+1}); cursor = f_{i+1}.
//   kForwardBackward(i)  (+1 forward) cursor is f_i; run slice i building its graph in the working
//                        core and back-propagate it at once; then the cursor is empty.
//   kBackward(i)         back-propagate the kept graph of slice i and release it; cursor empty.
//   kKeepFront(p)        cursor is f_p; keep a copy of it.
//   kFreeFront(p)        release the kept front f_p.
//   kRestore(p)          cursor = f_p, read from the kept front p, else the kept graph of slice p−1
//                        (its output) or of slice p (its input), else (kIsm, p = 0) the initial
//                        front. MakeSchedule only uses the first, the second and the last source.
// Gradients flow as usual: each backward receives dL/df_{i+1} from the previous one.
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

namespace slimfit::planner {

// Which seeds/002 program, i.e. what may be kept: fronts (HSM), slice graphs (ISM) or both (MSM).
enum class ScheduleKind {
  kHsm,  // §3.1 BPTT-HSM: selective hidden-state (front) memorisation
  kIsm,  // §3.2 BPTT-ISM: selective internal-state (slice graph) memorisation
  kMsm,  // §3.3–3.4 BPTT-MSM: mixed, with double memorisation of fronts removed
};

absl::string_view ScheduleKindName(ScheduleKind kind);  // "hsm", "ism", "msm"
// INVALID_ARGUMENT listing the accepted names when `name` is none of them.
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);

// Limits. Longer sequences: raise the slice size. They keep every table below ~128 MiB and every
// cost below 2^31.
inline constexpr int64_t kMaxScheduleSteps = 65535;
inline constexpr int64_t kMaxScheduleSlots = int64_t{1} << 40;
// (T+1)·m_eff·s cells per policy table (see Complexity above); RESOURCE_EXHAUSTED beyond.
inline constexpr int64_t kMaxPolicyTableCells = int64_t{1} << 24;
// Actions per generated schedule (8 bytes each); RESOURCE_EXHAUSTED beyond.
inline constexpr int64_t kMaxScheduleActions = int64_t{1} << 24;

// One step of a schedule. `index` is a slice (kForward, kForwardKeepGraph, kForwardBackward,
// kBackward: 0 ≤ index < steps) or a front position (kKeepFront, kFreeFront, kRestore:
// 0 ≤ index ≤ steps). The exact semantics are in "Executing a schedule" above.
struct ScheduleAction {
  enum class Type : uint8_t {
    kForward,
    kForwardKeepGraph,
    kForwardBackward,
    kBackward,
    kKeepFront,
    kFreeFront,
    kRestore,
  };
  Type type = Type::kForward;
  int32_t index = 0;

  friend bool operator==(const ScheduleAction& a, const ScheduleAction& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const ScheduleAction& a, const ScheduleAction& b) { return !(a == b); }
};

// "forward", "forward_keep_graph", "forward_backward", "backward", "keep_front", "free_front",
// "restore".
absl::string_view ScheduleActionTypeName(ScheduleAction::Type type);
std::string ScheduleActionToString(const ScheduleAction& action);  // e.g. "keep_front(12)"

// A complete schedule for `steps` slices under a budget of `slots` units: starting with the cursor
// at f_0 and nothing kept, it back-propagates every slice once, in order steps−1..0, never charges
// more than `slots` units, and ends with nothing kept.
struct Schedule {
  ScheduleKind kind = ScheduleKind::kHsm;
  int64_t steps = 0;
  int64_t slots = 0;
  double alpha = 0;  // kMsm only (graph sizes, see The machine); recorded for SimulateSchedule
  double beta = 0;
  // Slice forwards the actions run; equals OptimalCost(kind, steps, slots, alpha, beta).
  int64_t forward_count = 0;
  std::vector<ScheduleAction> actions;
};

// What SimulateSchedule measured.
struct ScheduleStats {
  int64_t forward_count = 0;   // kForward + kForwardKeepGraph + kForwardBackward
  int64_t backward_count = 0;  // kForwardBackward + kBackward; always `steps`
  int64_t restore_count = 0;
  int64_t kept_front_count = 0;  // kKeepFront actions
  int64_t kept_graph_count = 0;  // kForwardKeepGraph actions
  int64_t peak_units = 0;        // most units charged at once (kIsm: including a kForwardBackward)
  int64_t peak_kept_fronts = 0;  // most fronts kept at once
  int64_t peak_kept_graphs = 0;  // most graphs kept at once
};

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

// Replays `schedule.actions` on the machine for `steps` slices and a budget of `slots` units (the
// kind, alpha and beta come from the schedule; steps and slots are given separately so a schedule
// can be checked against another budget) and checks: every action is valid in its state (see
// Executing a schedule), every slice is back-propagated exactly once in order steps−1..0, nothing
// is forwarded after its backward, nothing stays kept at the end.
// INVALID_ARGUMENT: steps or slots out of range, bad alpha/beta (kMsm), or the first action that
//   breaks a rule (its number, the action and the rule in the message).
// RESOURCE_EXHAUSTED: the first action after which more than `slots` units are charged.
absl::StatusOr<ScheduleStats> SimulateSchedule(const Schedule& schedule, int64_t steps,
                                               int64_t slots);

}  // namespace slimfit::planner

#endif  // SLIMFIT_PLANNER_BPTT_SCHEDULE_H_
