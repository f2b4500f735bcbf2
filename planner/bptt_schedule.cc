#include "planner/bptt_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "performer/plan.h"

namespace slimfit::planner {
namespace {

using Type = ScheduleAction::Type;
using performer::GraphUnits;
using performer::MakeGraphUnits;
using performer::ValidateScheduleGraphSizes;
using performer::ValidateScheduleKind;
using performer::ValidateScheduleSlots;
using performer::ValidateScheduleSteps;

// Costs fit in 32 bits: C(t, m) ≤ t(t+1)/2 < 2^31 for t ≤ kMaxScheduleSteps.
static_assert(kMaxScheduleSteps * (kMaxScheduleSteps + 1) / 2 < int64_t{std::numeric_limits<int32_t>::max()},
              "costs must fit the 32-bit tables");
constexpr int64_t kInfiniteCost = std::numeric_limits<int64_t>::max();

// How a stretch is split (see "The programs" in the header). A decision is stored as
// (y << 2) | type.
enum DecisionType : uint32_t { kTail = 0, kFront = 1, kGraph = 2 };

uint32_t EncodeDecision(DecisionType type, int32_t y) { return (static_cast<uint32_t>(y) << 2) | type; }

// Budget beyond which C(t, m) stops falling for every t ≤ steps (so larger tables add nothing).
int64_t SaturatingSlots(ScheduleKind kind, int64_t steps, const GraphUnits& units) {
  if (kind != ScheduleKind::kMsm) return steps;  // HSM: 2t−1 for m ≥ t; ISM: t for m ≥ t
  return 1 + (steps - 1) * units.shared;         // MSM: chain of graph(1) pushes reaches t
}

// Exact fraction num/den with den > 0.
struct Fraction {
  int64_t num = 0;
  int64_t den = 1;
};

// Slope dy/dx with dx > 0.
struct Slope {
  int64_t dy = 0;
  int64_t dx = 1;
};

// Lower convex hull of the points (x, row[x]) of a table row, built left to right. The hull lies
// on or below every point it was given, which makes it a lower bound for branch and bound.
class LowerHull {
 public:
  void Add(int32_t x, int64_t y) {
    while (xs_.size() >= 2) {
      const size_t n = xs_.size();
      const int64_t x1 = xs_[n - 2], y1 = ys_[n - 2], x2 = xs_[n - 1], y2 = ys_[n - 1];
      // Drop (x2, y2) unless it lies strictly below the chord from (x1, y1) to (x, y).
      if ((y2 - y1) * (x - x1) >= (y - y1) * (x2 - x1)) {
        xs_.pop_back();
        ys_.pop_back();
      } else {
        break;
      }
    }
    xs_.push_back(x);
    ys_.push_back(y);
  }

  // The hull at integer z, xs_.front() ≤ z ≤ xs_.back().
  Fraction At(int32_t z) const {
    if (xs_.size() == 1) return {ys_[0], 1};
    const size_t j = Segment(z);
    const int64_t dx = xs_[j + 1] - xs_[j];
    return {ys_[j] * dx + (ys_[j + 1] - ys_[j]) * (z - xs_[j]), dx};
  }

  // The hull's slope on [z, z + 1], xs_.front() ≤ z < xs_.back(). Hull vertices are integers, so
  // the unit interval lies inside one segment.
  Slope SlopeAt(int32_t z) const {
    const size_t j = Segment(z);
    return {ys_[j + 1] - ys_[j], xs_[j + 1] - xs_[j]};
  }

 private:
  // Index j of the segment [xs_[j], xs_[j+1]] holding z (the last segment for z = xs_.back()).
  size_t Segment(int32_t z) const {
    const size_t after = static_cast<size_t>(std::upper_bound(xs_.begin(), xs_.end(), z) - xs_.begin());
    return std::min(after, xs_.size() - 1) - 1;
  }

  std::vector<int32_t> xs_;
  std::vector<int64_t> ys_;
};

// The first y in [lo, hi] with pred(y), for pred monotone (false...false true...true) and
// pred(hi) true. Gallops from `hint`, so a hint near the answer costs O(log distance).
template <typename Pred>
int32_t FirstTrue(int32_t lo, int32_t hi, int32_t hint, const Pred& pred) {
  hint = std::clamp(hint, lo, hi);
  int32_t bad, good;  // pred(bad) false (or bad = lo − 1), pred(good) true
  if (pred(hint)) {
    good = hint;
    bad = lo - 1;
    for (int32_t step = 1;; step *= 2) {
      const int32_t probe = good - step;
      if (probe < lo) break;
      if (!pred(probe)) {
        bad = probe;
        break;
      }
      good = probe;
    }
  } else {
    bad = hint;
    good = hi;
    for (int32_t step = 1;; step *= 2) {
      const int64_t probe = int64_t{bad} + step;
      if (probe >= hi) break;
      if (pred(static_cast<int32_t>(probe))) {
        good = static_cast<int32_t>(probe);
        break;
      }
      bad = static_cast<int32_t>(probe);
    }
  }
  while (good - bad > 1) {
    const int32_t mid = bad + (good - bad) / 2;
    if (pred(mid)) {
      good = mid;
    } else {
      bad = mid;
    }
  }
  return good;
}

struct Split {
  int64_t cost = kInfiniteCost;
  int32_t y = 0;
};

// Exact minimum of q(y) = y + a[y − a_off] + b[t − y] over lo ≤ y ≤ hi (lo ≤ hi), where a_hull
// and b_hull are lower convex hulls of a and b over every argument used. Branch and bound:
// L(y) = y + â(y − a_off) + b̂(t − y) ≤ q(y) is convex in y; its minimiser y0 is found by a
// galloping search from *hint, q(y0) is the first incumbent, and the neighbours of y0 are
// evaluated outwards while L(y) ≤ incumbent − 1 (q is an integer), stopping early when the
// incumbent reaches ceil(L(y0)). Ties keep the first split found. *hint becomes y0.
Split MinimizeSplit(int32_t t, int32_t lo, int32_t hi, const uint32_t* a, const LowerHull& a_hull,
                    int32_t a_off, const uint32_t* b, const LowerHull& b_hull, int32_t* hint) {
  // L(y+1) − L(y) = 1 + slope_â(y − a_off) − slope_b̂(t − y − 1) is nondecreasing in y.
  auto rises = [&](int32_t y) {
    if (y >= hi) return true;
    const Slope sa = a_hull.SlopeAt(y - a_off);
    const Slope sb = b_hull.SlopeAt(t - y - 1);
    return sa.dx * sb.dx + sa.dy * sb.dx - sb.dy * sa.dx >= 0;
  };
  const int32_t y0 = FirstTrue(lo, hi, *hint, rises);
  *hint = y0;

  // L(y) as num / den.
  auto bound = [&](int32_t y, absl::int128* num, absl::int128* den) {
    const Fraction fa = a_hull.At(y - a_off);
    const Fraction fb = b_hull.At(t - y);
    *den = absl::int128(fa.den) * fb.den;
    *num = absl::int128(y) * *den + absl::int128(fa.num) * fb.den + absl::int128(fb.num) * fa.den;
  };
  auto q = [&](int32_t y) { return int64_t{y} + a[y - a_off] + b[t - y]; };

  absl::int128 num, den;
  bound(y0, &num, &den);
  const int64_t lower = static_cast<int64_t>((num + den - 1) / den);  // ceil(L(y0)), L ≥ 0
  Split best{q(y0), y0};
  auto worth_trying = [&](int32_t y) {  // L(y) ≤ best − 1
    absl::int128 n, d;
    bound(y, &n, &d);
    return n <= absl::int128(best.cost - 1) * d;
  };
  int32_t left = y0 - 1, right = y0 + 1;
  bool left_open = left >= lo, right_open = right <= hi;
  while (best.cost > lower && (left_open || right_open)) {
    if (right_open) {
      if (worth_trying(right)) {
        const int64_t cost = q(right);
        if (cost < best.cost) best = {cost, right};
        right_open = ++right <= hi;
      } else {
        right_open = false;
      }
    }
    if (best.cost <= lower) break;
    if (left_open) {
      if (worth_trying(left)) {
        const int64_t cost = q(left);
        if (cost < best.cost) best = {cost, left};
        left_open = --left >= lo;
      } else {
        left_open = false;
      }
    }
  }
  return best;
}

}  // namespace

struct BpttPolicy::Tables {
  ScheduleKind kind = ScheduleKind::kHsm;
  int32_t steps = 0;        // T: the table covers 0 ≤ t ≤ T
  int64_t slots = 0;        // the max_slots asked for
  int64_t table_slots = 0;  // m_eff: the table covers 1 ≤ m ≤ m_eff; larger budgets are equal
  double alpha = 0;
  double beta = 0;
  GraphUnits units;
  int states = 1;  // 2 when the two kMsm start states differ (units.first[0] != first[1])
  std::vector<uint32_t> cost;
  std::vector<uint32_t> decision;

  // REQUIRES 1 ≤ m ≤ table_slots, 0 ≤ t ≤ steps.
  size_t Index(int c, int64_t m, int32_t t) const {
    const size_t state = states == 1 ? 0 : static_cast<size_t>(c);
    return (state * static_cast<size_t>(table_slots) + static_cast<size_t>(m - 1)) *
               static_cast<size_t>(steps + 1) +
           static_cast<size_t>(t);
  }

  // C_c(t, m) for any m (≤ 0: infeasible unless t = 0; > table_slots: saturated).
  int64_t CostAt(int c, int64_t m, int32_t t) const {
    if (t == 0) return 0;
    if (m <= 0) return kInfiniteCost;
    return cost[Index(c, std::min(m, table_slots), t)];
  }

  void Solve();
  absl::StatusOr<std::vector<ScheduleAction>> Generate(int32_t t, int64_t m) const;
};

void BpttPolicy::Tables::Solve() {
  const bool is_ism = kind == ScheduleKind::kIsm;
  const bool is_msm = kind == ScheduleKind::kMsm;
  // Hulls of completed rows, indexed like the rows; each row's hull grows with the row.
  std::vector<LowerHull> hulls(static_cast<size_t>(states * table_slots));
  auto hull_of = [&](int c, int64_t m) -> LowerHull& {
    return hulls[static_cast<size_t>((states == 1 ? 0 : c) * table_slots + (m - 1))];
  };
  for (int64_t m = 1; m <= table_slots; ++m) {
    // State 0 first: state 1 may refer to state 0 of the same budget (graph(1) with α' = 1).
    for (int c = 0; c < states; ++c) {
      uint32_t* row = &cost[Index(c, m, 0)];
      uint32_t* choice = &decision[Index(c, m, 0)];
      LowerHull& hull = hull_of(c, m);
      row[0] = 0;
      choice[0] = EncodeDecision(kTail, 0);
      hull.Add(0, 0);
      int32_t front_hint = 1, graph_hint = 2;
      for (int32_t t = 1; t <= steps; ++t) {
        int64_t best = int64_t{t} + row[t - 1];
        uint32_t best_choice = EncodeDecision(kTail, t);
        if (is_ism) {
          // graph(y): y + C(y−1, m) + C(t−y, m−1), 1 ≤ y < t.
          if (m >= 2 && t >= 2) {
            const Split split = MinimizeSplit(t, 1, t - 1, row, hull, 1, &cost[Index(0, m - 1, 0)],
                                              hull_of(0, m - 1), &graph_hint);
            if (split.cost < best) {
              best = split.cost;
              best_choice = EncodeDecision(kGraph, split.y);
            }
          }
        } else {
          // front(y): y + C_c(y, m) + C_1(t−y, m−1), 1 ≤ y < t.
          if (m >= 2 && t >= 2) {
            const Split split = MinimizeSplit(t, 1, t - 1, row, hull, 0, &cost[Index(1, m - 1, 0)],
                                              hull_of(1, m - 1), &front_hint);
            if (split.cost < best) {
              best = split.cost;
              best_choice = EncodeDecision(kFront, split.y);
            }
          }
          if (is_msm && t >= 2) {
            // graph(1): 1 + C_0(t−1, m − g_c(1)).
            const int64_t first = m - units.first[c];
            if (first >= 1) {
              const int64_t candidate = 1 + CostAt(0, first, t - 1);
              if (candidate < best) {
                best = candidate;
                best_choice = EncodeDecision(kGraph, 1);
              }
            }
            // graph(y): y + C_c(y−1, m) + C_0(t−y, m − α'), 2 ≤ y < t.
            const int64_t rest = m - units.full;
            if (rest >= 1 && t >= 3) {
              const Split split = MinimizeSplit(t, 2, t - 1, row, hull, 1, &cost[Index(0, rest, 0)],
                                                hull_of(0, rest), &graph_hint);
              if (split.cost < best) {
                best = split.cost;
                best_choice = EncodeDecision(kGraph, split.y);
              }
            }
          }
        }
        row[t] = static_cast<uint32_t>(best);
        choice[t] = best_choice;
        hull.Add(t, best);
      }
    }
  }
}

absl::StatusOr<std::vector<ScheduleAction>> BpttPolicy::Tables::Generate(int32_t steps_wanted,
                                                                         int64_t slots_wanted) const {
  // One stretch being solved: slices [s, s + t) with budget m from start state c. The left part
  // of every split is the same frame with a smaller t (a loop, not a call); right parts are
  // pushed, so the stack depth is bounded by the nesting of right parts (≤ 2m), not by t.
  struct Frame {
    int32_t s = 0;
    int32_t t = 0;
    int64_t m = 0;
    int c = 1;
    bool start_kept = false;          // f_s is a kept front owned by this frame
    int32_t pending_backward = -1;    // kept graph to back-propagate when the right part is done
    bool pending_free_start = false;  // then release f_s (graph(1) that shared it)
  };
  const bool is_ism = kind == ScheduleKind::kIsm;
  std::vector<ScheduleAction> actions;
  actions.reserve(static_cast<size_t>(
      std::min<int64_t>(kMaxScheduleActions, 2 * CostAt(1, slots_wanted, steps_wanted) + 8)));
  bool overflow = false;
  auto emit = [&](Type type, int32_t index) {
    if (static_cast<int64_t>(actions.size()) >= kMaxScheduleActions) {
      overflow = true;
      return;
    }
    actions.push_back({type, index});
  };

  std::vector<Frame> stack;
  stack.push_back(Frame{0, steps_wanted, std::min(slots_wanted, table_slots), 1, false, -1, false});
  int32_t cursor = 0;  // position of the front in the cursor; −1 when empty
  while (!stack.empty() && !overflow) {
    Frame& frame = stack.back();
    if (frame.pending_backward >= 0) {
      emit(Type::kBackward, frame.pending_backward);
      cursor = -1;
      frame.pending_backward = -1;
    }
    if (frame.pending_free_start) {
      emit(Type::kFreeFront, frame.s);
      frame.start_kept = false;
      frame.pending_free_start = false;
    }
    if (frame.t == 0) {
      stack.pop_back();
      continue;
    }
    const int32_t s = frame.s, t = frame.t;
    const int64_t m = frame.m;
    const int c = frame.c;
    const uint32_t choice = decision[Index(c, m, t)];
    const auto type = static_cast<DecisionType>(choice & 3);
    const int32_t y = static_cast<int32_t>(choice >> 2);

    if (cursor != s) {
      emit(Type::kRestore, s);
      cursor = s;
    }
    bool share = false;
    if (!is_ism && c == 1) {
      // Keep the start front exactly while something will still read it: the left part restores
      // it, or a graph(1) shares it as its input.
      share = type == kGraph && y == 1 && units.share_first;
      const bool needed = share || type == kFront || (type == kGraph && y >= 2) || (type == kTail && t >= 2);
      if (needed && !frame.start_kept) {
        emit(Type::kKeepFront, s);
        frame.start_kept = true;
      } else if (!needed && frame.start_kept) {
        emit(Type::kFreeFront, s);
        frame.start_kept = false;
      }
    }
    switch (type) {
      case kTail: {
        for (int32_t i = s; i < s + t - 1; ++i) emit(Type::kForward, i);
        emit(Type::kForwardBackward, s + t - 1);
        cursor = -1;
        frame.t = t - 1;
        break;
      }
      case kFront: {
        for (int32_t i = s; i < s + y; ++i) emit(Type::kForward, i);
        cursor = s + y;
        frame.t = y;
        stack.push_back(Frame{s + y, t - y, m - 1, 1, false, -1, false});  // invalidates `frame`
        break;
      }
      case kGraph: {
        for (int32_t i = s; i < s + y - 1; ++i) emit(Type::kForward, i);
        emit(Type::kForwardKeepGraph, s + y - 1);
        cursor = s + y;
        const int64_t charge = is_ism ? 1 : (y == 1 ? units.first[c] : units.full);
        frame.pending_backward = s + y - 1;
        frame.pending_free_start = share;
        frame.t = y - 1;
        stack.push_back(Frame{s + y, t - y, m - charge, 0, false, -1, false});  // invalidates
        break;
      }
    }
  }
  if (overflow) {
    return absl::ResourceExhaustedError(absl::StrCat(
        ScheduleKindName(kind), " schedule for ", steps_wanted, " steps with ", slots_wanted,
        " slots has more than ", kMaxScheduleActions, " actions (it runs ",
        CostAt(1, slots_wanted, steps_wanted), " slice forwards); give it more slots or use larger slices"));
  }
  return actions;
}

BpttPolicy::BpttPolicy(std::shared_ptr<const Tables> tables) : tables_(std::move(tables)) {}

absl::StatusOr<BpttPolicy> BpttPolicy::Create(ScheduleKind kind, int64_t max_steps, int64_t max_slots,
                                              double alpha, double beta) {
  if (absl::Status status = ValidateScheduleKind(kind); !status.ok()) return status;
  if (absl::Status status = ValidateScheduleSteps(max_steps, "max_steps"); !status.ok()) return status;
  if (absl::Status status = ValidateScheduleSlots(max_slots, "max_slots"); !status.ok()) return status;
  if (absl::Status status = ValidateScheduleGraphSizes(kind, alpha, beta); !status.ok()) return status;

  auto tables = std::make_shared<Tables>();
  tables->kind = kind;
  tables->steps = static_cast<int32_t>(max_steps);
  tables->slots = max_slots;
  tables->alpha = alpha;
  tables->beta = beta;
  tables->units = MakeGraphUnits(kind, alpha, beta, max_slots + 1);
  tables->states = tables->units.first[0] == tables->units.first[1] ? 1 : 2;
  tables->table_slots = std::min(max_slots, SaturatingSlots(kind, max_steps, tables->units));
  const int64_t cells = (max_steps + 1) * tables->table_slots * tables->states;
  if (cells > kMaxPolicyTableCells) {
    return absl::ResourceExhaustedError(absl::StrCat(
        ScheduleKindName(kind), " policy table for ", max_steps, " steps x ", tables->table_slots, " slots",
        tables->states == 2 ? " x 2 start states" : "", " needs ", cells, " cells, more than the limit of ",
        kMaxPolicyTableCells, "; use fewer slots or larger slices"));
  }
  tables->cost.assign(static_cast<size_t>(cells), 0);
  tables->decision.assign(static_cast<size_t>(cells), 0);
  tables->Solve();
  return BpttPolicy(std::move(tables));
}

ScheduleKind BpttPolicy::kind() const { return tables_->kind; }
int64_t BpttPolicy::max_steps() const { return tables_->steps; }
int64_t BpttPolicy::max_slots() const { return tables_->slots; }
double BpttPolicy::alpha() const { return tables_->alpha; }
double BpttPolicy::beta() const { return tables_->beta; }

namespace {

absl::Status ValidateQuery(int64_t steps, int64_t slots, int64_t max_steps, int64_t max_slots) {
  if (steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("steps must be >= 1, got ", steps));
  }
  if (slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat("slots must be >= 1, got ", slots));
  }
  if (steps > max_steps) {
    return absl::OutOfRangeError(
        absl::StrCat("steps ", steps, " exceeds the ", max_steps, " the policy was built for"));
  }
  if (slots > max_slots) {
    return absl::OutOfRangeError(
        absl::StrCat("slots ", slots, " exceeds the ", max_slots, " the policy was built for"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> BpttPolicy::Cost(int64_t steps, int64_t slots) const {
  if (absl::Status status = ValidateQuery(steps, slots, tables_->steps, tables_->slots); !status.ok()) {
    return status;
  }
  return tables_->CostAt(1, slots, static_cast<int32_t>(steps));
}

absl::StatusOr<int64_t> BpttPolicy::SlotsForCost(int64_t steps, int64_t max_forwards) const {
  if (absl::Status status = ValidateQuery(steps, 1, tables_->steps, tables_->slots); !status.ok()) {
    return status;
  }
  const int32_t t = static_cast<int32_t>(steps);
  const int64_t best = tables_->CostAt(1, tables_->table_slots, t);
  if (best > max_forwards) {
    return absl::NotFoundError(absl::StrCat(ScheduleKindName(tables_->kind), ": ", steps,
                                            " steps need at least ", best, " slice forwards with up to ",
                                            tables_->slots, " slots; asked for at most ", max_forwards));
  }
  // C(t, m) is nonincreasing in m: binary search for the first budget that meets the cap.
  int64_t lo = 0, hi = tables_->table_slots;  // C(t, lo) > cap (lo = 0: infeasible), C(t, hi) ≤ cap
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (tables_->CostAt(1, mid, t) <= max_forwards) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

absl::StatusOr<Schedule> BpttPolicy::MakeSchedule(int64_t steps, int64_t slots) const {
  if (absl::Status status = ValidateQuery(steps, slots, tables_->steps, tables_->slots); !status.ok()) {
    return status;
  }
  const int32_t t = static_cast<int32_t>(steps);
  Schedule schedule;
  schedule.kind = tables_->kind;
  schedule.steps = steps;
  schedule.slots = slots;
  schedule.alpha = tables_->alpha;
  schedule.beta = tables_->beta;
  schedule.forward_count = tables_->CostAt(1, slots, t);
  if (schedule.forward_count > kMaxScheduleActions) {
    return absl::ResourceExhaustedError(
        absl::StrCat(ScheduleKindName(tables_->kind), " schedule for ", steps, " steps with ", slots,
                     " slots runs ", schedule.forward_count, " slice forwards, more than the limit of ",
                     kMaxScheduleActions, " actions; give it more slots or use larger slices"));
  }
  absl::StatusOr<std::vector<ScheduleAction>> actions = tables_->Generate(t, slots);
  if (!actions.ok()) return actions.status();
  schedule.actions = *std::move(actions);
  return schedule;
}

absl::StatusOr<int64_t> OptimalCost(ScheduleKind kind, int64_t steps, int64_t slots, double alpha,
                                    double beta) {
  absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(kind, steps, slots, alpha, beta);
  if (!policy.ok()) return policy.status();
  return policy->Cost(steps, slots);
}

absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int64_t steps, int64_t slots, double alpha,
                                      double beta) {
  absl::StatusOr<BpttPolicy> policy = BpttPolicy::Create(kind, steps, slots, alpha, beta);
  if (!policy.ok()) return policy.status();
  return policy->MakeSchedule(steps, slots);
}

absl::StatusOr<Schedule> ScheduleForPlan(const performer::Plan& plan, int64_t slices) {
  if (plan.front_policy != performer::FrontPolicy::kDp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan's front policy is ", performer::FrontPolicyName(plan.front_policy), ", not dp"));
  }
  return MakeSchedule(plan.schedule, slices, plan.slots, plan.alpha, plan.beta);
}

}  // namespace slimfit::planner
