#include "performer/sliced_gradient.h"

#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "performer/async_host_copy.h"
#include "performer/sweep_stretch_rule.h"

namespace slimfit::performer::internal {

namespace {

// What a query's denominator φ(q)·Z is measured against, layer by layer: every feature's
// component Z_f, as one float64 tensor on the front's device. Features and queries are
// non-negative, so a query's denominator grows past a front's by at most its largest component
// ratio, whichever features it weighs; head totals Σ_f Z_f alone miss a query that weighs the
// features an early front barely has while the head's total is large (fuzzing found such an input
// for relu, 38% off; front_conditioning_test builds them for elu+1 and x², 4% and 211% off).
at::Tensor FeatureTotals(const ModelFront& front) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> denominators;
  for (const Front& f : front) denominators.push_back(f.denominator);
  // Two operations whatever the depth: they are launched once a stretch, on a host that is the
  // bottleneck where slices are small.
  return at::stack(denominators).to(at::kDouble);
}

std::vector<double> ToVector(const at::Tensor& host) {
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

// The denominators of a run of fronts that the backward sweep will rebuild from one front: a
// lower bound of their denominator components (the floor), against which a later front's growth
// is measured.
class RebuildFloor {
 public:
  bool set() const { return !floor_.empty(); }
  // A document starts: its fronts begin anew from zero; the floor is set by its first front.
  void Clear() { floor_.clear(); }
  void Set(std::vector<double> totals) { floor_ = std::move(totals); }
  // Components whose floor is still zero (relu's, before the feature switches on) take `totals`.
  void Fill(const std::vector<double>& totals) {
    for (size_t i = 0; i < floor_.size(); ++i) {
      if (!(floor_[i] > 0)) floor_[i] = totals[i];
    }
  }
  // Whether some component in `totals` exceeds `base` (the floor when null) by more than
  // kMaxRebuildGrowth, over the components where the latter is positive (NaN exceeds nothing).
  bool Outgrown(const std::vector<double>& totals, const std::vector<double>* base = nullptr) const {
    const std::vector<double>& below = base != nullptr ? *base : floor_;
    for (size_t i = 0; i < below.size(); ++i) {
      if (below[i] > 0 && totals[i] > kMaxRebuildGrowth * below[i]) return true;
    }
    return false;
  }

 private:
  std::vector<double> floor_;
};

}  // namespace

void SweepGradient(SliceRunner& runner, SliceGraphs* graphs, const Plan& plan, const ModelConfig& c,
                   int64_t* stored_fronts_peak, ConditioningCounts* conditioning) {
  const int64_t slices = runner.slices();
  // Features are non-negative, so a denominator component that is exactly zero stays zero until
  // some token of the document switches it on; relu features do this all the time. Subtraction
  // would turn such an exact zero into rounding noise, and noise over a zero denominator is not
  // small (num / (den + 1e-16)). So the forward sweep records, per layer and component, the slice
  // in which it first became non-zero within the current document ("onset"), and the backward
  // sweep restores those exact zeros. Costs one [k, M] integer tensor per layer.
  // Only relu produces exact zeros in practice (elu+1 and FAVOR+ features are positive, x² is zero
  // only for an exactly zero projection), so only relu pays for the bookkeeping.
  const bool track_onset = c.feature_map == FeatureMap::kRelu;
  const int64_t never = slices;
  const at::TensorOptions long_options = runner.zero().denominator.options().dtype(at::kLong);
  std::vector<at::Tensor> onset(c.layers, at::full({c.heads, c.features_per_head()}, never, long_options));
  struct Kept {
    ModelFront fronts;
    std::vector<at::Tensor> onset;
  };
  // Fronts entering slices, kept by the front policy or because a document starts in the slice.
  std::map<int64_t, Kept> kept;
  // The forward sweep stops before the last slice: the backward sweep starts by rebuilding slice
  // N from U(N−1), which the sweep ends with, so U(N) itself is never needed.
  //
  // Where no front inside it is needed, the sweep runs up to kSweepSlices slices as one stretch
  // (sweep_stretch_rule.h, which the cost model shares). Relu's onset bookkeeping needs every
  // slice boundary, so it sweeps slice by slice.
  auto keep = [&](int64_t n) {
    return n > 0 && n + 1 < slices &&
           (plan.front_policy == FrontPolicy::kStore || !runner.Reversible(n) ||
            (plan.front_policy == FrontPolicy::kResync && n % plan.resync_every == 0));
  };
  // The subtracting policies bound how far a front's denominators grow past those of the fronts
  // that will be rebuilt from it (sliced_gradient.h); sweeps over several slices start only once
  // the run's floor is known.
  const bool guard = plan.front_policy != FrontPolicy::kStore;
  RebuildFloor run_floor;
  // Fronts the guard needed exact once kMaxConditioningFronts were kept: the backward sweep
  // recomputes each by a forward from the nearest exact front below it.
  std::set<int64_t> recompute;
  auto keep_for_precision = [&](int64_t n, const ModelFront& entering,
                                const std::vector<at::Tensor>& entering_onset) {
    if (n == 0 || kept.count(n) > 0 || recompute.count(n) > 0) return;  // U(0) is zero; kept fronts are exact
    if (conditioning->kept >= kMaxConditioningFronts) {
      recompute.insert(n);
      ++conditioning->recomputed;
      return;
    }
    kept.emplace(n, Kept{entering, entering_onset});
    ++conditioning->kept;
    *stored_fronts_peak = std::max<int64_t>(*stored_fronts_peak, kept.size());
  };
  ModelFront front = runner.ZeroModelFront();
  // A swept stretch whose check waits for its exit front's components. They are read one
  // stretch late, while the device runs the next stretch (AsyncHostCopy): reading them at once
  // would drain a GPU's queue at every stretch (9–10% of config A's time at C = 16 on an H100).
  struct Swept {
    int64_t n = 0, end = 0;
    ModelFront entering;  // U(n)
    std::vector<at::Tensor> entering_onset;
    AsyncHostCopy totals;  // of U(end), under the guard
  };
  // Sweeps slices [n, end) from `front` (U(n)) to U(end) and starts the copy of U(end)'s totals.
  auto advance = [&](int64_t n, int64_t end) {
    Swept swept{n, end, front, onset, AsyncHostCopy()};
    const Stretch stretch = runner.StretchOfSlices(n, end);
    front = graphs != nullptr && graphs->Replayable(stretch) ? graphs->Advance(stretch, front, end - n)
                                                             : runner.Advance(stretch, front, end - n);
    if (track_onset) {
      at::NoGradGuard no_grad;
      for (int64_t r = 0; r < c.layers; ++r) {
        const at::Tensor on = front[r].denominator > 0;
        const at::Tensor first_time = stretch.layout.reversible ? on & (onset[r] == never) : on;
        onset[r] = at::where(first_time, at::full({}, n, long_options),
                             stretch.layout.reversible ? onset[r] : at::full({}, never, long_options));
      }
    }
    if (guard) swept.totals = AsyncHostCopy(FeatureTotals(front));
    return swept;
  };
  // The guard's check of a swept stretch, in sweep order: keeps U(n) where the stretch grew the
  // denominators too far past the floor, then restarts the floor where the policy keeps U(end).
  // False where a stretch of several slices grew that far by itself: the fronts inside it need the
  // keep placed exactly, and the caller sweeps it again slice by slice.
  auto check = [&](Swept& swept) {
    std::vector<double> totals = ToVector(swept.totals.Read());
    if (!run_floor.set()) {
      run_floor.Set(totals);  // the first front a run will rebuild (the stretch is one slice)
    } else if (!run_floor.Outgrown(totals)) {
      run_floor.Fill(totals);
    } else {
      std::vector<double> entering_totals = ToVector(FeatureTotals(swept.entering).cpu());
      if (swept.end - swept.n > 1 && run_floor.Outgrown(totals, &entering_totals)) return false;
      // U(n) ends the run; the next one starts with the fronts after it.
      keep_for_precision(swept.n, swept.entering, swept.entering_onset);
      if (swept.end - swept.n == 1) {
        run_floor.Set(totals);
      } else {
        run_floor.Set(std::move(entering_totals));
        run_floor.Fill(totals);
      }
    }
    // A front kept by the policy (or where a document starts) begins a new run: the fronts after it,
    // rebuilt from a later front. The run's floor is the first of them, U(end + 1), which the next
    // stretch (one slice) ends with.
    if (keep(swept.end)) run_floor.Clear();
    return true;
  };
  std::optional<Swept> unchecked;
  // Checks `unchecked`. Where its stretch must be swept again, rolls the sweep back to the stretch's
  // start — dropping `launched_after` (the stretch swept after it, if any: released first, so the
  // sweep holds no more fronts than usual) and a policy front kept at its end — and sweeps it slice
  // by slice, checking each slice at once (rare: each such stretch grew 256-fold). Returns whether
  // it rolled back; `front` is then U(end) of the checked stretch.
  auto settle = [&](std::optional<Swept>* launched_after) {
    if (!unchecked) return false;
    Swept swept = std::move(*unchecked);
    unchecked.reset();
    if (check(swept)) return false;
    conditioning->forwards += swept.end - swept.n;
    if (launched_after != nullptr && launched_after->has_value()) {
      conditioning->forwards += (*launched_after)->end - (*launched_after)->n;
      launched_after->reset();
    }
    front = swept.entering;
    onset = swept.entering_onset;
    kept.erase(swept.end);  // the only kept front past swept.n: fronts kept for precision lie below
    for (int64_t j = swept.n; j < swept.end; ++j) {
      Swept one = advance(j, j + 1);
      check(one);
    }
    return true;
  };
  // Whether the current run's floor is set, or will be once the stretches swept are checked:
  // sweeps over several slices start only then.
  bool run_started = false;
  int64_t n = 0;
  while (n + 1 < slices) {
    if (keep(n)) {
      kept.emplace(n, Kept{front, onset});
      run_started = false;  // the next run's floor is the front after this one
    }
    *stored_fronts_peak = std::max<int64_t>(*stored_fronts_peak, kept.size());
    int64_t end = n + 1;
    if (!track_onset && (!guard || run_started)) {
      while (end < slices - 1 && end - n < kSweepSlices && !keep(end)) ++end;
    }
    std::optional<Swept> swept = advance(n, end);
    if (!guard) {
      n = end;
      continue;
    }
    run_started = true;
    // The previous stretch's check, while the device runs this one.
    if (settle(&swept)) continue;  // swept again up to n: this stretch is dropped and swept anew
    unchecked = std::move(swept);
    n = end;
  }
  settle(nullptr);

  // U(n) exactly, by a forward from the nearest exact front below it (kept, or U(0) = 0; a document
  // starting in between would have been kept), in stretches as the forward sweep runs them. Each
  // recomputed front marks a 256-fold growth of some denominator component, so a call needs few (the dtype's
  // range bounds them: float32's spans 256³⁴), each at most N slice forwards; they show in
  // slice_forwards and conditioning_fronts_recomputed.
  auto forward_to = [&](int64_t n) {
    auto below = kept.lower_bound(n);
    int64_t j = 0;
    ModelFront value = runner.ZeroModelFront();
    if (below != kept.begin()) {
      --below;
      j = below->first;
      value = below->second.fronts;
    }
    while (j < n) {
      const int64_t end = std::min(n, j + (track_onset ? 1 : kSweepSlices));
      conditioning->forwards += end - j;
      const Stretch stretch = runner.StretchOfSlices(j, end);
      value = graphs != nullptr && graphs->Replayable(stretch) ? graphs->Advance(stretch, value, end - j)
                                                               : runner.Advance(stretch, value, end - j);
      j = end;
    }
    return value;
  };

  // `front` is now U(N−1), the last slice's incoming front; walk back. `exit_grad` is G(n) for the
  // slice being rebuilt, and `front` the front leaving it.
  ModelFront exit_grad;  // empty: zero
  for (int64_t n = slices - 1; n >= 0; --n) {
    const Stretch stretch = runner.StretchOf(n);
    auto kept_it = kept.find(n);
    std::optional<ModelFront> recomputed;
    if (recompute.count(n) > 0) recomputed = forward_to(n);
    const ModelFront* given = kept_it != kept.end() ? &kept_it->second.fronts
                              : recomputed          ? &*recomputed
                                                    : nullptr;
    // A replayed step: a slice that continues its front, whose G(n) is known, and whose entry is
    // given or recovered by plain subtraction (relu's onset zeros are restored directly). Under
    // `reverse` a given entry is one the guard kept or recomputed — a few a call at most — so its
    // slice runs directly: a graph captured for it would never repay its memory pool, which the
    // planner counts for one step graph (`resync`, whose kept fronts recur, replays both kinds).
    const bool subtract = given == nullptr;
    if (graphs != nullptr && n > 0 && !exit_grad.empty() && graphs->Replayable(stretch) &&
        !(subtract && track_onset) && (subtract || plan.front_policy != FrontPolicy::kReverse)) {
      SliceGraphs::StepResult step = graphs->Step(n, stretch, subtract ? front : *given, subtract, exit_grad);
      front = std::move(step.entry);
      exit_grad = std::move(step.entry_grad);
    } else {
      SliceRunner::Graph graph = runner.Build(n, stretch, [&](int64_t r, const AttentionInputs& in) -> Front {
        if (n == 0) return runner.zero();
        if (given != nullptr) return (*given)[r];
        if (n + 1 == slices) return front[r];
        // U(n−1) by subtraction, with the components that switched on in slice n or later restored
        // to exact zeros.
        Front value = FrontBefore(front[r], in);
        if (track_onset) {
          at::NoGradGuard no_grad;
          const at::Tensor off = onset[r] >= n;
          value.numerator.masked_fill_(off.unsqueeze(2), 0);
          value.denominator.masked_fill_(off, 0);
        }
        return value;
      });
      front = graph.entry;  // U(n) is no longer needed: release it before back-propagating
      exit_grad = runner.Backpropagate(graph, exit_grad);
    }
    if (kept_it != kept.end()) {
      onset = std::move(kept_it->second.onset);
      kept.erase(kept_it);
    }
  }
}

absl::Status ScheduledGradient(SliceRunner& runner, SliceGraphs* graphs, const Schedule& schedule,
                               int64_t* stored_fronts_peak) {
  std::optional<ModelFront> cursor = runner.ZeroModelFront();
  int64_t cursor_position = 0;
  std::map<int64_t, ModelFront> kept_fronts;
  std::map<int64_t, SliceRunner::Graph> kept_graphs;
  ModelFront exit_grad;  // G of the next slice to back-propagate
  auto broken = [&](const ScheduleAction& action, absl::string_view why) {
    return absl::InternalError(
        absl::StrCat("dp schedule action ", ScheduleActionToString(action), " cannot run: ", why));
  };
  auto detached = [](const ModelFront& fronts) {
    ModelFront copy;
    for (const Front& f : fronts) copy.push_back(Front{f.numerator.detach(), f.denominator.detach()});
    return copy;
  };
  for (const ScheduleAction& action : schedule.actions) {
    const int64_t i = action.index;
    using Type = ScheduleAction::Type;
    switch (action.type) {
      case Type::kForward:
        if (!cursor || cursor_position != i) return broken(action, "the cursor is not at the slice's front");
        if (const Stretch stretch = runner.StretchOf(i); graphs != nullptr && graphs->Replayable(stretch)) {
          cursor = graphs->Advance(stretch, *cursor, 1);
        } else {
          cursor = runner.Advance(stretch, *cursor);
        }
        cursor_position = i + 1;
        break;
      case Type::kForwardKeepGraph:
      case Type::kForwardBackward: {
        if (!cursor || cursor_position != i) return broken(action, "the cursor is not at the slice's front");
        const ModelFront entry = *cursor;
        const Stretch stretch = runner.StretchOf(i);
        if (action.type == Type::kForwardBackward && graphs != nullptr && i > 0 && !exit_grad.empty() &&
            graphs->Replayable(stretch)) {
          cursor.reset();
          exit_grad = graphs->Step(i, stretch, entry, /*subtract=*/false, exit_grad).entry_grad;
          break;
        }
        SliceRunner::Graph graph =
            runner.Build(i, stretch, [&](int64_t r, const AttentionInputs&) { return entry[r]; });
        if (action.type == Type::kForwardBackward) {
          cursor.reset();
          exit_grad = runner.Backpropagate(graph, exit_grad);
        } else {
          cursor = detached(graph.exit);
          cursor_position = i + 1;
          kept_graphs.emplace(i, std::move(graph));
        }
        break;
      }
      case Type::kBackward: {
        auto it = kept_graphs.find(i);
        if (it == kept_graphs.end()) return broken(action, "the slice's graph was not kept");
        cursor.reset();
        exit_grad = runner.Backpropagate(it->second, exit_grad);
        kept_graphs.erase(it);
        break;
      }
      case Type::kKeepFront:
        if (!cursor || cursor_position != i) return broken(action, "the cursor is not at that front");
        kept_fronts[i] = *cursor;
        break;
      case Type::kFreeFront:
        kept_fronts.erase(i);
        break;
      case Type::kRestore: {
        if (auto it = kept_fronts.find(i); it != kept_fronts.end()) {
          cursor = it->second;
        } else if (auto graph = kept_graphs.find(i - 1); graph != kept_graphs.end()) {
          cursor = detached(graph->second.exit);
        } else if (auto graph_at = kept_graphs.find(i); graph_at != kept_graphs.end()) {
          cursor = graph_at->second.entry;
        } else if (i == 0) {
          cursor = runner.ZeroModelFront();
        } else {
          return broken(action, "that front is neither kept nor held by a kept graph");
        }
        cursor_position = i;
        break;
      }
    }
    *stored_fronts_peak = std::max<int64_t>(*stored_fronts_peak, kept_fronts.size() + kept_graphs.size());
  }
  if (!kept_graphs.empty() || !kept_fronts.empty()) {
    return absl::InternalError("dp schedule ended with kept fronts or graphs");
  }
  return absl::OkStatus();
}

}  // namespace slimfit::performer::internal
