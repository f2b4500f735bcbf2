// What a submitted job gets when its spec leaves a field out. The coordinator fills the defaults
// in at submission (WithJobDefaults) and stores the result, so the stored job shows what runs and a
// later change of a default never changes a job already submitted.
#ifndef SLIMFIT_SERVER_JOB_DEFAULTS_H_
#define SLIMFIT_SERVER_JOB_DEFAULTS_H_

#include "proto/slimfit.pb.h"

namespace slimfit::server {

// AdamW's learning rate when a spec gives none.
inline constexpr double kDefaultAdamWLearningRate = 3e-4;
// Spot-check verification and quarantine when a spec does not say (JobSpec.verify_fraction,
// JobSpec.quarantine_after).
inline constexpr double kDefaultVerifyFraction = 0.05;
inline constexpr int kDefaultQuarantineAfter = 3;
// A local-steps job's outer optimizer when its spec gives none: SGD with Nesterov momentum, DiLoCo's
// published settings (Douillard et al. 2023).
inline constexpr double kDefaultOuterLearningRate = 0.7;
inline constexpr double kDefaultOuterMomentum = 0.9;

// `spec` with the defaults a submission gets filled in, so the stored job shows what runs: a fresh
// model's init_readout_scale (performer::kTrainingReadoutScale), AdamW's learning rate
// (kDefaultAdamWLearningRate), the warm-up, min(100, max(1, steps / 10)) steps where steps are the
// rounds, or a worker's inner steps (rounds · local_steps) in a local-steps job
// (docs/DESIGN.md, "Training defaults"), a local-steps job's outer optimizer (SGD unless the spec picks
// AdamW; for SGD, each of momentum kDefaultOuterMomentum, Nesterov when momentum > 0 and learning rate
// kDefaultOuterLearningRate that the spec leaves out; no warm-up), the
// verification fraction (0 with local steps) and the quarantine threshold. Fields the spec sets
// are kept.
v1::JobSpec WithJobDefaults(v1::JobSpec spec);

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_JOB_DEFAULTS_H_
