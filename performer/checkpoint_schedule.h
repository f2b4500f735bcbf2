// Checkpoint schedules for the backward sweep over slices: what the `dp` front policy (DESIGN.md)
// executes. A schedule is a flat list of actions — run a slice, keep its graph, back-propagate,
// keep/free/restore a front — that an engine runs one after another. This file defines the machine
// the actions run on, what each costs in memory, and a simulator that replays a schedule, checks
// every rule and counts its work. It does not say how a good schedule is *chosen*: the optimal
// dynamic programs of Gruslys et al. 2016 ("Memory-Efficient Backpropagation Through Time": BPTT-HSM,
// ISM and MSM) that produce them live in planner/bptt_schedule.h.
//
// ---- The machine --------------------------------------------------------------------------------
// Slices 0..T−1. Front f_i is the recurrent state entering slice i: f_0 is the initial front, slice
// i maps f_i to f_{i+1}. (In the paper a slice is a time step, a front is a hidden state, a slice
// graph is an "internal RNN core state".) The executor holds
//   - the cursor: one working front, initially f_0; it is not charged against the budget;
//   - kept fronts, keyed by position p;
//   - kept graphs, keyed by slice i: slice i's autograd graph together with its input f_i and its
//     output f_{i+1}, both of which can be read back;
//   - (HSM, MSM) a working core with room for one transient graph, not charged (the paper's §3.1: "a
//     single RNN core available for the purposes of intermediate calculations").
// Slice i can be back-propagated once slice i+1 has been (order T−1, T−2, ..., 0), and needs the
// graph of slice i: either kept, or built in the working core from the cursor right before.
//
// Memory units and what `slots` (the budget m) counts, per kind:
//   kHsm  a kept front costs 1; graphs are never kept. f_0 must be kept like any other front to be
//         read back.
//   kIsm  a kept graph costs 1; fronts are never kept; f_0 can always be read back for free.
//         There is no working core: kForwardBackward needs one free slot for its moment.
//   kMsm  units of one front (α ≥ 1, 0 < β ≤ α, the paper's §3.3–3.4). A kept front costs 1. A kept
//         graph of slice i costs β' = ceil(β) while f_i is otherwise held (kept front i, or kept
//         graph i−1 whose output is f_i), and α' = ceil(α) otherwise — α is the size of a slice
//         graph including its input front, β its size when that front is stored anyway (often
//         α − 1). Charges follow the state: freeing front i turns a kept graph i from β' to α'. α
//         and β may be fractional (bytes(graph) / bytes(front)); they are rounded up, so the budget
//         is never exceeded.
// At every moment the charged units must be ≤ slots.
//
// ---- Cost convention ----------------------------------------------------------------------------
// C(t, m) — Schedule::forward_count, ScheduleStats::forward_count — counts every slice forward the
// schedule runs: the first pass over the sequence included, and every forward that rebuilds a
// slice's graph right before its backward (kForwardBackward). Backward passes are not counted:
// there are always exactly t. Ordinary BPTT (all t graphs kept) costs t, so the recomputation
// overhead is C(t, m) − t. This is the C(t, m) of the paper's eq. 1–10.
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
//                        front.
// Gradients flow as usual: each backward receives dL/df_{i+1} from the previous one.
//
// Thread safety: plain value types and pure functions.
#ifndef SLIMFIT_PERFORMER_CHECKPOINT_SCHEDULE_H_
#define SLIMFIT_PERFORMER_CHECKPOINT_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit::performer {

// What a schedule may keep: fronts (HSM), slice graphs (ISM) or both (MSM).
enum class ScheduleKind {
  kHsm,  // the paper's §3.1 BPTT-HSM: selective hidden-state (front) memorisation
  kIsm,  // §3.2 BPTT-ISM: selective internal-state (slice graph) memorisation
  kMsm,  // §3.3–3.4 BPTT-MSM: mixed, with double memorisation of fronts removed
};

absl::string_view ScheduleKindName(ScheduleKind kind);  // "hsm", "ism", "msm"
// INVALID_ARGUMENT listing the accepted names when `name` is none of them.
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);

// Limits. Longer sequences: raise the slice size. They keep every planner table below ~128 MiB and
// every cost below 2^31.
inline constexpr int64_t kMaxScheduleSteps = 65535;
inline constexpr int64_t kMaxScheduleSlots = int64_t{1} << 40;
// Actions per schedule (8 bytes each); RESOURCE_EXHAUSTED beyond.
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
  // Slice forwards the actions run (see Cost convention).
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

// Replays `schedule.actions` on the machine for `steps` slices and a budget of `slots` units (the
// kind, alpha and beta come from the schedule; steps and slots are given separately so a schedule
// can be checked against another budget) and checks: every action is valid in its state (see
// Executing a schedule), every slice is back-propagated exactly once in order steps−1..0, nothing
// is forwarded after its backward, nothing stays kept at the end.
// INVALID_ARGUMENT: steps or slots out of range, bad alpha/beta (kMsm), or the first action that
//   breaks a rule (its number, the action and the rule in the message).
// RESOURCE_EXHAUSTED: the first action after which more than `slots` units are charged.
absl::StatusOr<ScheduleStats> SimulateSchedule(const Schedule& schedule, int64_t steps, int64_t slots);

// ---- The machine's rules, shared with the programs that choose schedules ------------------------

// INVALID_ARGUMENT unless `kind` is one of the three.
absl::Status ValidateScheduleKind(ScheduleKind kind);
// INVALID_ARGUMENT naming `name` unless 1 ≤ steps ≤ kMaxScheduleSteps.
absl::Status ValidateScheduleSteps(int64_t steps, absl::string_view name);
// INVALID_ARGUMENT naming `name` unless 1 ≤ slots ≤ kMaxScheduleSlots.
absl::Status ValidateScheduleSlots(int64_t slots, absl::string_view name);
// kMsm: INVALID_ARGUMENT unless α is finite and ≥ 1 and β finite in (0, α]. Other kinds: OK.
absl::Status ValidateScheduleGraphSizes(ScheduleKind kind, double alpha, double beta);

// What kept graphs are charged, in budget units (see Memory units).
struct GraphUnits {
  int64_t full = 1;    // α' (kMsm); 1 (kIsm)
  int64_t shared = 1;  // β' (kMsm); 1 (kIsm)
  // What a program's graph(1) takes from the budget, by start state: [0] the start is the output of
  // a kept graph; [1] the start is a kept front, which graph(1) may drop for a graph holding its own
  // copy of the input (planner/bptt_schedule.h, "The programs").
  int64_t first[2] = {1, 1};
  // In state 1, graph(1) keeps the start front beside a β' graph rather than dropping it for an α'
  // graph: strictly cheaper only when β' + 1 < α'.
  bool share_first = false;
};

// The charges for `kind` and graph sizes α, β (kMsm only), each clamped to `cap`: a charge ≥ cap
// never fits a budget below it, so the clamp changes no answer and keeps sums far from overflow.
// REQUIRES: ValidateScheduleGraphSizes(kind, alpha, beta) is OK; cap ≥ 1.
GraphUnits MakeGraphUnits(ScheduleKind kind, double alpha, double beta, int64_t cap);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_CHECKPOINT_SCHEDULE_H_
