#include "performer/checkpoint_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace slimfit::performer {
namespace {

using Type = ScheduleAction::Type;

bool IsValidKind(ScheduleKind kind) {
  return kind == ScheduleKind::kHsm || kind == ScheduleKind::kIsm || kind == ScheduleKind::kMsm;
}

// ceil(size) in units, clamped to `cap` (anything ≥ cap never fits the budget, so the clamp does
// not change any answer and keeps sums far from overflow).
int64_t UnitsOf(double size, int64_t cap) {
  if (size >= static_cast<double>(cap)) return cap;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(size)));
}

}  // namespace

absl::Status ValidateScheduleKind(ScheduleKind kind) {
  if (IsValidKind(kind)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown schedule kind ", static_cast<int>(kind), "; expected hsm, ism or msm"));
}

absl::Status ValidateScheduleSteps(int64_t steps, absl::string_view name) {
  if (steps >= 1 && steps <= kMaxScheduleSteps) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, " must be in [1, ", kMaxScheduleSteps, "], got ", steps,
                   steps > kMaxScheduleSteps ? "; use larger slices for longer sequences" : ""));
}

absl::Status ValidateScheduleSlots(int64_t slots, absl::string_view name) {
  if (slots >= 1 && slots <= kMaxScheduleSlots) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, " must be in [1, ", kMaxScheduleSlots, "], got ", slots,
                   slots < 1 ? " (the start front needs one slot; ISM needs one slot for the "
                               "graph being back-propagated)"
                             : ""));
}

absl::Status ValidateScheduleGraphSizes(ScheduleKind kind, double alpha, double beta) {
  if (kind != ScheduleKind::kMsm) return absl::OkStatus();
  if (!std::isfinite(alpha) || alpha < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("msm: alpha (slice graph size in fronts, input front included) must be finite and >= 1, "
                     "got ",
                     alpha));
  }
  if (!std::isfinite(beta) || beta <= 0 || beta > alpha) {
    return absl::InvalidArgumentError(
        absl::StrCat("msm: beta (slice graph size in fronts when its input front is held anyway) must be "
                     "finite and in (0, alpha = ",
                     alpha, "], got ", beta));
  }
  return absl::OkStatus();
}

GraphUnits MakeGraphUnits(ScheduleKind kind, double alpha, double beta, int64_t cap) {
  GraphUnits units;
  if (kind != ScheduleKind::kMsm) return units;
  units.full = UnitsOf(alpha, cap);
  units.shared = std::min(UnitsOf(beta, cap), units.full);
  units.first[0] = units.shared;
  units.first[1] = std::min(units.shared, units.full - 1);
  units.share_first = units.shared + 1 < units.full;
  return units;
}

absl::string_view ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kHsm:
      return "hsm";
    case ScheduleKind::kIsm:
      return "ism";
    case ScheduleKind::kMsm:
      return "msm";
  }
  return "unknown";
}

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name) {
  for (ScheduleKind kind : {ScheduleKind::kHsm, ScheduleKind::kIsm, ScheduleKind::kMsm}) {
    if (name == ScheduleKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown schedule kind \"", name, "\"; expected hsm, ism or msm"));
}

absl::string_view ScheduleActionTypeName(ScheduleAction::Type type) {
  switch (type) {
    case Type::kForward:
      return "forward";
    case Type::kForwardKeepGraph:
      return "forward_keep_graph";
    case Type::kForwardBackward:
      return "forward_backward";
    case Type::kBackward:
      return "backward";
    case Type::kKeepFront:
      return "keep_front";
    case Type::kFreeFront:
      return "free_front";
    case Type::kRestore:
      return "restore";
  }
  return "unknown";
}

std::string ScheduleActionToString(const ScheduleAction& action) {
  return absl::StrCat(ScheduleActionTypeName(action.type), "(", action.index, ")");
}

absl::StatusOr<ScheduleStats> SimulateSchedule(const Schedule& schedule, int64_t steps, int64_t slots) {
  const ScheduleKind kind = schedule.kind;
  if (absl::Status status = ValidateScheduleKind(kind); !status.ok()) return status;
  if (absl::Status status = ValidateScheduleSteps(steps, "steps"); !status.ok()) return status;
  if (absl::Status status = ValidateScheduleSlots(slots, "slots"); !status.ok()) return status;
  if (absl::Status status = ValidateScheduleGraphSizes(kind, schedule.alpha, schedule.beta); !status.ok()) {
    return status;
  }
  const bool is_hsm = kind == ScheduleKind::kHsm;
  const bool is_ism = kind == ScheduleKind::kIsm;
  // A single charge above slots already overflows; clamping there keeps sums small.
  const GraphUnits units = MakeGraphUnits(kind, schedule.alpha, schedule.beta, slots + 1);

  std::vector<char> front(static_cast<size_t>(steps + 1), 0);  // kept fronts by position
  std::vector<char> graph(static_cast<size_t>(steps), 0);      // kept graphs by slice
  // Units charged for graph i (0 if not kept): β' while f_i is held elsewhere, else α'.
  auto graph_charge = [&](int64_t i) -> int64_t {
    if (i < 0 || i >= steps || !graph[i]) return 0;
    if (is_ism) return 1;
    const bool input_held = front[i] || (i >= 1 && graph[i - 1]);
    return input_held ? units.shared : units.full;
  };

  ScheduleStats stats;
  int64_t cursor = 0;        // −1: empty
  int64_t next = steps - 1;  // the slice to back-propagate next
  int64_t usage = 0, kept_fronts = 0, kept_graphs = 0;
  const int64_t count = static_cast<int64_t>(schedule.actions.size());
  for (int64_t k = 0; k < count; ++k) {
    const ScheduleAction& action = schedule.actions[static_cast<size_t>(k)];
    const int64_t i = action.index;
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat("action ", k, " (", ScheduleActionToString(action), "): ", why));
    };
    auto cursor_text = [&]() {
      return cursor < 0 ? std::string("the cursor is empty")
                        : absl::StrCat("the cursor holds front ", cursor);
    };
    int64_t transient = 0;  // kIsm: the slot a kForwardBackward graph occupies for its moment
    switch (action.type) {
      case Type::kForward:
      case Type::kForwardKeepGraph:
      case Type::kForwardBackward: {
        if (i < 0 || i >= steps) {
          return fail(absl::StrCat("slice out of range [0, ", steps, ")"));
        }
        if (cursor != i) return fail(absl::StrCat(cursor_text(), ", not front ", i));
        if (i > next) return fail(absl::StrCat("slice ", i, " was already back-propagated"));
        ++stats.forward_count;
        if (action.type == Type::kForward) {
          cursor = i + 1;
        } else if (action.type == Type::kForwardKeepGraph) {
          if (is_hsm) return fail("hsm schedules keep no slice graphs");
          if (graph[i]) return fail(absl::StrCat("the graph of slice ", i, " is already kept"));
          const int64_t before = graph_charge(i + 1);
          graph[i] = 1;
          usage += graph_charge(i) + graph_charge(i + 1) - before;
          ++kept_graphs;
          ++stats.kept_graph_count;
          cursor = i + 1;
        } else {
          if (i != next) {
            return fail(absl::StrCat("slice ", next, " must be back-propagated before slice ", i));
          }
          if (is_ism) transient = 1;
          ++stats.backward_count;
          --next;
          cursor = -1;
        }
        break;
      }
      case Type::kBackward: {
        if (i < 0 || i >= steps) {
          return fail(absl::StrCat("slice out of range [0, ", steps, ")"));
        }
        if (i != next) {
          return fail(next < 0 ? std::string("every slice was already back-propagated")
                               : absl::StrCat("slice ", next, " must be back-propagated before slice ", i));
        }
        if (!graph[i]) return fail(absl::StrCat("the graph of slice ", i, " is not kept"));
        const int64_t before = graph_charge(i) + graph_charge(i + 1);
        graph[i] = 0;
        usage += graph_charge(i + 1) - before;
        --kept_graphs;
        ++stats.backward_count;
        --next;
        cursor = -1;
        break;
      }
      case Type::kKeepFront:
      case Type::kFreeFront:
      case Type::kRestore: {
        if (i < 0 || i > steps) {
          return fail(absl::StrCat("front position out of range [0, ", steps, "]"));
        }
        if (action.type == Type::kRestore) {
          const bool readable =
              front[i] || (i >= 1 && graph[i - 1]) || (i < steps && graph[i]) || (is_ism && i == 0);
          if (!readable) {
            return fail(absl::StrCat("front ", i, " is neither kept nor held by a kept graph of slice ",
                                     i - 1, " or ", i));
          }
          cursor = i;
          ++stats.restore_count;
          break;
        }
        if (action.type == Type::kKeepFront) {
          if (is_ism) return fail("ism schedules keep no fronts");
          if (cursor != i) return fail(absl::StrCat(cursor_text(), ", not front ", i));
          if (front[i]) return fail(absl::StrCat("front ", i, " is already kept"));
        } else if (!front[i]) {
          return fail(absl::StrCat("front ", i, " is not kept"));
        }
        const int64_t before = graph_charge(i);
        const bool keep = action.type == Type::kKeepFront;
        front[i] = keep ? 1 : 0;
        usage += (keep ? 1 : -1) + graph_charge(i) - before;
        kept_fronts += keep ? 1 : -1;
        if (keep) ++stats.kept_front_count;
        break;
      }
      default:
        return fail(absl::StrCat("unknown action type ", static_cast<int>(action.type)));
    }
    if (usage + transient > slots) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "action ", k, " (", ScheduleActionToString(action), "): ", usage + transient, " units in use (",
          kept_fronts, " fronts, ", kept_graphs, " graphs",
          transient > 0 ? ", 1 graph being back-propagated" : "", "), more than the ", slots, " slots"));
    }
    stats.peak_units = std::max(stats.peak_units, usage + transient);
    stats.peak_kept_fronts = std::max(stats.peak_kept_fronts, kept_fronts);
    stats.peak_kept_graphs = std::max(stats.peak_kept_graphs, kept_graphs);
  }
  if (next >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the schedule ends before slices ", next, "..0 are back-propagated"));
  }
  if (kept_fronts > 0 || kept_graphs > 0) {
    return absl::InvalidArgumentError(absl::StrCat("the schedule ends with ", kept_fronts, " fronts and ",
                                                   kept_graphs, " graphs still kept"));
  }
  return stats;
}

}  // namespace slimfit::performer
