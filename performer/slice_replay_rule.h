// When the engine replays a call's slices as CUDA graphs (SliceReplay::kAuto,
// performer/slice_graphs.h) — without LibTorch, so the engine and the planner's cost model
// (planner/cost_model.h), which counts the graphs' memory pool, share one rule.
//
// Thread safety: constants and pure functions.
#ifndef SLIMFIT_PERFORMER_SLICE_REPLAY_RULE_H_
#define SLIMFIT_PERFORMER_SLICE_REPLAY_RULE_H_

#include <cstdint>

namespace slimfit::performer {

// Calls of fewer slices run op by op: a shape is replayed from its third occurrence on, and the
// capture costs about one direct run, so a few slices do not repay it (on an H100, C = 1024 at
// L = 4096 — 4 slices — took 0.114 s with graphs against 0.089 s without; 8 slices of 512 gained).
inline constexpr int64_t kMinReplayedSlices = 8;
// Calls with larger slices run op by op: the graphs' pool keeps about one slice's scratch for the
// whole call beside the scratch of the slices that still run directly. Up to C = 256 the gain is
// 2–8× (H100, BENCHMARKS.md); at C = 1024 on a d_model 1024 model it was 1.37× for 632 MiB of pool.
inline constexpr int64_t kMaxReplayedSlice = 256;

// Whether kAuto replays a call of `slices` slices of `slice` tokens on a CUDA device (in a build
// with CUDA graphs, while captures work).
inline bool AutoReplaysSlices(int64_t slices, int64_t slice) {
  return slices >= kMinReplayedSlices && slice > 0 && slice <= kMaxReplayedSlice;
}

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_SLICE_REPLAY_RULE_H_
