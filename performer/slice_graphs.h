// Internal to //performer:gradient_engine: the sliced gradient's repeated slices launched as
// replayed device work (replayable_work.h) instead of op by op.
//
// A stretch without a document start inside does the same device work whatever its tokens and
// fronts: only its number of rows and of predicted tokens shape it. So each such shape is run
// directly the first time (which also warms LibTorch up), captured the second time, and replayed
// from then on from static input buffers that SliceGraphs refills: the stretch's tokens, positions
// and targets (one host-to-device copy, as before), the incoming front, the incoming front
// gradient. Two kinds of work are replayed:
//  - Step: a backward-sweep step — rebuild slice n from its incoming front U(n−1) (given, or by
//    subtraction from U(n)), back-propagate loss/normaliser + ⟨G(n), U(n)⟩ into the parameter
//    gradients, and return U(n−1) and G(n−1);
//  - Advance: a graph-free forward over one or more whole slices, returning the outgoing front.
// The replayed work is the same LibTorch calls on the same values as SliceRunner's direct path,
// so results are the same; the returned fronts are copies the caller owns.
//
// Thread safety: as SliceRunner, whose Context, batch and leaves it uses.
#ifndef SLIMFIT_PERFORMER_SLICE_GRAPHS_H_
#define SLIMFIT_PERFORMER_SLICE_GRAPHS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "performer/gradient_engine.h"
#include "performer/replayable_work.h"
#include "performer/slice_replay_rule.h"
#include "performer/slice_runner.h"
#include "performer/sweep_stretch_rule.h"

namespace slimfit::performer::internal {

class SliceGraphs {
 public:
  // The longest slice replayed (slice_replay_rule.h: calls with larger slices run op by op).
  static constexpr int64_t kMaxSlice = kMaxReplayedSlice;
  // The longest stretch replayed: the forward sweep's kSweepSlices slices of kMaxSlice.
  static constexpr int64_t kMaxRows = kSweepSlices * kMaxSlice;
  // Shapes captured per call at most: backward steps (entry given or subtracted, a full slice or
  // one that ends the last document) and the forward sweep's stretches of one to kSweepSlices
  // slices.
  static constexpr int kMaxShapes = 8;

  // How a call of `slices` slices of `slice` tokens on `device` replays them under `replay`
  // (GradientOptions::slice_replay), or nothing for op by op; `*why_not` says why CUDA graphs that
  // kAuto would use are off for the process.
  static std::optional<ReplayableWork::Mode> ModeFor(SliceReplay replay, const at::Device& device,
                                                     int64_t slices, int64_t slice, std::string* why_not);

  // Why CUDA graph captures are off for the rest of this process, if they are: after a capture
  // fails, LibTorch's caching allocator may be left routing into the failed capture's pool (PyTorch
  // 2.x ends that routing only after a successful end of capture), so no further capture is tried.
  static std::optional<std::string> CapturesDisabledBecause();

  SliceGraphs(SliceRunner& runner, ReplayableWork::Mode mode, const at::Device& device);
  ~SliceGraphs();

  // Whether `stretch` can be stepped or advanced here: no document start inside it (it continues
  // the incoming front), at most kMaxRows rows, and replays still on (a failed capture turns them
  // off for the rest of the call, see fallback_reason()).
  bool Replayable(const Stretch& stretch) const;

  struct StepResult {
    ModelFront entry;       // U(n−1), the front entering the slice
    ModelFront entry_grad;  // G(n−1), its gradient
  };
  // The backward-sweep step of slice n > 0 (`stretch`). `front` is U(n−1) itself (subtract false)
  // or U(n) (subtract true: U(n−1) = U(n) − the slice's contribution). `exit_grad` is G(n), one
  // Front per layer. REQUIRES: Replayable(stretch).
  StepResult Step(int64_t n, const Stretch& stretch, const ModelFront& front, bool subtract,
                  const ModelFront& exit_grad);

  // A graph-free forward over `stretch` (`slices_covered` whole slices) from `entry`; returns the
  // outgoing front. REQUIRES: Replayable(stretch).
  ModelFront Advance(const Stretch& stretch, const ModelFront& entry, int64_t slices_covered);

  // Slice computations that ran as a replay (each advance counts the slices it covers).
  int64_t replayed_slices() const { return replayed_slices_; }
  // Device memory the captured graphs keep for their scratch (ReplayableWork::pool_bytes, summed).
  int64_t pool_bytes() const;
  // Why replays were turned off during this call (a capture failed; then for the process, too);
  // empty when they were not.
  const std::string& fallback_reason() const { return fallback_reason_; }

 private:
  enum class Kind { kStepGiven, kStepSubtract, kAdvance };
  using Key = std::tuple<Kind, int64_t, int64_t>;  // kind, rows, predicted tokens
  struct Shape;

  // The shape for `stretch`, created on first use; nullptr when kMaxShapes are taken.
  Shape* ShapeFor(Kind kind, const Stretch& stretch);
  // Runs `shape`'s body: directly the first time, then as a replay; a capture that fails turns
  // replays off and runs the body directly.
  void Run(Shape& shape, int64_t slices_covered);

  SliceRunner& runner_;
  ReplayableWork::Mode mode_;
  const at::Device device_;
  bool on_ = true;
  std::map<Key, std::unique_ptr<Shape>> shapes_;
  const ReplayableWork* pool_owner_ = nullptr;
  int64_t replayed_slices_ = 0;
  std::string fallback_reason_;
};

}  // namespace slimfit::performer::internal

#endif  // SLIMFIT_PERFORMER_SLICE_GRAPHS_H_
