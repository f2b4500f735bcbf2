// The engine's speed revision: what a calibrated device profile (planner/calibration.h) was
// measured against.
//
// A profile's time and memory constants are fitted to the engine that ran the probes; a later
// engine that runs slices in a different way makes them wrong (the planner then errs in its
// choice of C and in how it splits work between workers). The revision is bumped by such a change,
// and workers key their cached calibration on it (worker/worker_state.h), so they calibrate again
// once after an upgrade instead of planning with stale constants.
//
//   1  every engine before the field existed (cached profiles that do not name a revision)
//   2  2026-11-26: slices forward and backward by hand on the CPU (explicit_backprop.h); chunked
//      prefix sums a group of blocks at a time on a GPU (prefix_attention_blocks.h)
//   3  2026-11-26: calibration also measures what the device holds outside the model's tensors
//      (a CUDA card's cuBLAS workspaces) and whether the engine copies forward weight layouts;
//      profiles without them under-predict a GPU's peak and over-predict a oneDNN-less CPU's
//   4  2026-11-26: small CPU slices add their weight gradients 64 inner rows at a time
//      (batched_weight_gradients.h): C ≤ 32 faster, and calibration subtracts the buffers
//   5  2026-11-27: calibration measures the memory pool of slices replayed as CUDA graphs
//      (DeviceProfile::replays_slices, graph_pool_overhead_bytes); profiles without it
//      under-predict a GPU's peak wherever slices replay
//   6  2026-11-27: slices by hand on every device (explicit_backprop.h), not only the CPU: on a GPU
//      1.15–2.3× faster at config A than through autograd, working memory 0–18% above it, and no
//      cuBLAS workspaces of autograd's device thread; and FAVOR+ by hand too (on a CPU at config A
//      C = 16 ~30% faster, with batched weight gradients); calibration measures bf16_time_ratio
//   7  2026-11-27: bfloat16 products by hand too (explicit_backprop.h), no longer through
//      autograd, with the weights rounded once per call (PrepareForwardLayouts): bf16_time_ratio
//      changes (on the reference CPU at config A, C = 16 1.63 s through autograd, 0.64 s now)
//   8  2026-11-27: calibration runs every probe with bfloat16 products too and fits their own rate,
//      size penalty and per-layer overhead (DeviceProfile::bf16_flops_per_second, …) instead of
//      one whole-call ratio, which under-predicted small bfloat16 slices on a CPU by up to ~2.5×
//
// Thread safety: a constant.
#ifndef SLIMFIT_PERFORMER_ENGINE_REVISION_H_
#define SLIMFIT_PERFORMER_ENGINE_REVISION_H_

namespace slimfit::performer {

inline constexpr int kEngineRevision = 8;

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_ENGINE_REVISION_H_
