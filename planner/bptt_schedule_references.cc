#include "planner/bptt_schedule_references.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <deque>

#include "absl/strings/str_cat.h"

namespace slimfit::planner {
namespace {

int64_t Ceil(double x) { return static_cast<int64_t>(std::ceil(x)); }

}  // namespace

std::string VariantName(const Variant& v) {
  return v.kind == ScheduleKind::kMsm ? absl::StrCat("msm(alpha=", v.alpha, ", beta=", v.beta, ")")
                                      : std::string(ScheduleKindName(v.kind));
}

const std::vector<Variant>& AllVariants() {
  static const auto* variants = new std::vector<Variant>{
      {ScheduleKind::kHsm, 0, 0}, {ScheduleKind::kIsm, 0, 0},     {ScheduleKind::kMsm, 2, 1},
      {ScheduleKind::kMsm, 3, 2}, {ScheduleKind::kMsm, 5, 4},     {ScheduleKind::kMsm, 4, 2},
      {ScheduleKind::kMsm, 3, 1}, {ScheduleKind::kMsm, 2, 2},     {ScheduleKind::kMsm, 3, 3},
      {ScheduleKind::kMsm, 1, 1}, {ScheduleKind::kMsm, 2.5, 1.2}, {ScheduleKind::kMsm, 3.2, 2.5},
  };
  return *variants;
}

// ---- Exhaustive search over the machine of the header -------------------------------------------
// A 0-1 breadth-first search over every state (slices left, cursor, kept fronts, kept graphs)
// reachable by any valid action; forwards cost 1, everything else 0. Independent of the programs.
int64_t ExhaustiveCost(const Variant& v, int t, int m) {
  const bool hsm = v.kind == ScheduleKind::kHsm, ism = v.kind == ScheduleKind::kIsm;
  const int64_t full = hsm || ism ? 1 : Ceil(v.alpha);
  const int64_t shared = hsm || ism ? 1 : Ceil(v.beta);
  const int front_bits = t + 1, graph_bits = t;
  auto usage = [&](uint32_t fronts, uint32_t graphs) -> int64_t {
    if (hsm) return __builtin_popcount(fronts);
    if (ism) return __builtin_popcount(graphs);
    int64_t units = __builtin_popcount(fronts);
    for (int i = 0; i < t; ++i) {
      if (!(graphs >> i & 1)) continue;
      const bool held = (fronts >> i & 1) || (i >= 1 && (graphs >> (i - 1) & 1));
      units += held ? shared : full;
    }
    return units;
  };
  auto readable = [&](int p, uint32_t fronts, uint32_t graphs) {
    return (fronts >> p & 1) || (p >= 1 && (graphs >> (p - 1) & 1)) || (p < t && (graphs >> p & 1)) ||
           (ism && p == 0);
  };
  struct State {
    int left;    // slices not yet back-propagated: next is left − 1
    int cursor;  // −1: empty
    uint32_t fronts, graphs;
  };
  auto index = [&](const State& s) {
    return ((static_cast<size_t>(s.left) * (t + 2) + (s.cursor + 1)) << (front_bits + graph_bits)) |
           (static_cast<size_t>(s.fronts) << graph_bits) | s.graphs;
  };
  std::vector<int32_t> dist(static_cast<size_t>((t + 1) * (t + 2)) << (front_bits + graph_bits), -1);
  std::vector<char> done(dist.size(), 0);
  std::deque<State> queue;
  const State start{t, 0, 0, 0};
  dist[index(start)] = 0;
  queue.push_back(start);
  while (!queue.empty()) {
    const State s = queue.front();
    queue.pop_front();
    const size_t si = index(s);
    if (done[si]) continue;
    done[si] = 1;
    const int32_t d = dist[si];
    if (s.left == 0) return d;
    auto relax = [&](const State& n, int cost) {
      const size_t ni = index(n);
      if (dist[ni] < 0 || dist[ni] > d + cost) {
        dist[ni] = d + cost;
        if (cost == 0) {
          queue.push_front(n);
        } else {
          queue.push_back(n);
        }
      }
    };
    const int c = s.cursor;
    if (c >= 0 && c < s.left) {
      relax({s.left, c + 1, s.fronts, s.graphs}, 1);  // forward
      if (!hsm && !(s.graphs >> c & 1)) {             // forward, keep graph
        const uint32_t g = s.graphs | (1u << c);
        if (usage(s.fronts, g) <= m) relax({s.left, c + 1, s.fronts, g}, 1);
      }
      if (c == s.left - 1 && (!ism || usage(s.fronts, s.graphs) + 1 <= m)) {
        relax({s.left - 1, -1, s.fronts, s.graphs}, 1);  // forward + backward
      }
    }
    if (!ism && c >= 0 && !(s.fronts >> c & 1)) {  // keep front
      const uint32_t f = s.fronts | (1u << c);
      if (usage(f, s.graphs) <= m) relax({s.left, c, f, s.graphs}, 0);
    }
    for (int p = 0; p <= t; ++p) {
      if (s.fronts >> p & 1) {  // free front
        const uint32_t f = s.fronts & ~(1u << p);
        if (usage(f, s.graphs) <= m) relax({s.left, c, f, s.graphs}, 0);
      }
      if (p != c && p <= s.left && readable(p, s.fronts, s.graphs)) {
        relax({s.left, p, s.fronts, s.graphs}, 0);  // restore
      }
    }
    if (s.graphs >> (s.left - 1) & 1) {  // backward of a kept graph
      const uint32_t g = s.graphs & ~(1u << (s.left - 1));
      if (usage(s.fronts, g) <= m) relax({s.left - 1, -1, s.fronts, g}, 0);
    }
  }
  return kReferenceInf;
}

// ---- The programs written out plainly, O(t²·m) --------------------------------------------------
// C[c][m][t] per the header's recurrences (c: start state), without hulls or pruning.
std::vector<std::vector<std::vector<int64_t>>> ReferenceTables(const Variant& v, int tmax, int mmax) {
  const bool hsm = v.kind == ScheduleKind::kHsm, ism = v.kind == ScheduleKind::kIsm;
  const int64_t full = Ceil(v.alpha), shared = Ceil(v.beta);
  std::vector<std::vector<std::vector<int64_t>>> c_table(
      2, std::vector<std::vector<int64_t>>(mmax + 1, std::vector<int64_t>(tmax + 1, kReferenceInf)));
  auto at = [&](int c, int64_t m, int t) -> int64_t {
    if (t == 0) return 0;
    if (m <= 0) return kReferenceInf;
    return c_table[c][m][t];
  };
  for (int m = 1; m <= mmax; ++m) {
    for (int c = 0; c < 2; ++c) {
      c_table[c][m][0] = 0;
      for (int t = 1; t <= tmax; ++t) {
        int64_t best = t + at(c, m, t - 1);
        for (int y = 1; y < t; ++y) {
          if (!ism) best = std::min(best, y + at(c, m, y) + at(1, m - 1, t - y));
          if (ism) best = std::min(best, y + at(c, m, y - 1) + at(c, m - 1, t - y));
          if (!hsm && !ism) {
            const int64_t g = y >= 2 ? full : (c == 0 ? shared : std::min(shared, full - 1));
            best = std::min(best, y + at(c, m, y - 1) + at(0, m - g, t - y));
          }
        }
        c_table[c][m][t] = std::min(best, kReferenceInf);
      }
    }
  }
  return c_table;
}

// The seed's own programs, boundary conditions as printed: Algorithm 1 (HSM), eq. 4–5 (ISM),
// eq. 6–10 (MSM, one state). C[m][t].
std::vector<std::vector<int64_t>> SeedTables(const Variant& v, int tmax, int mmax) {
  std::vector<std::vector<int64_t>> c(mmax + 1, std::vector<int64_t>(tmax + 1, kReferenceInf));
  auto at = [&](int64_t m, int t) -> int64_t {
    if (t == 0) return 0;
    if (m <= 0) return kReferenceInf;
    return c[m][t];
  };
  for (int m = 1; m <= mmax; ++m) c[m][0] = 0;
  if (v.kind == ScheduleKind::kHsm) {
    for (int t = 1; t <= tmax; ++t) {
      c[1][t] = int64_t{t} * (t + 1) / 2;
      for (int m = t; m <= mmax; ++m) c[m][t] = 2 * t - 1;
    }
    for (int m = 2; m <= mmax; ++m) {
      for (int t = m + 1; t <= tmax; ++t) {
        int64_t best = kReferenceInf;
        for (int y = 1; y < t; ++y) best = std::min(best, y + c[m][y] + c[m - 1][t - y]);
        c[m][t] = best;
      }
    }
    return c;
  }
  const int64_t alpha = Ceil(v.alpha), beta = Ceil(v.beta);
  for (int m = 1; m <= mmax; ++m) {
    for (int t = 1; t <= tmax; ++t) {
      if (m == 1) {
        c[m][t] = int64_t{t} * (t + 1) / 2;
        continue;
      }
      if (v.kind == ScheduleKind::kIsm) {
        if (m >= t) {
          c[m][t] = t;
          continue;
        }
        int64_t best = kReferenceInf;
        for (int y = 1; y <= t; ++y) best = std::min(best, y + at(m, y - 1) + at(m - 1, t - y));
        c[m][t] = best;
        continue;
      }
      if (m >= alpha * t) {
        c[m][t] = t;
        continue;
      }
      int64_t best = kReferenceInf;
      for (int y = 1; y < t; ++y) best = std::min(best, y + at(m, y) + at(m - 1, t - y));
      for (int y = 1; y <= t; ++y) {
        const int64_t g = y > 1 ? alpha : beta;
        best = std::min(best, y + at(m, y - 1) + (t == y ? 0 : at(m - g, t - y)));
      }
      c[m][t] = std::min(best, kReferenceInf);
    }
  }
  return c;
}

}  // namespace slimfit::planner
