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

// `spec` with the defaults a submission gets filled in, so the stored job shows what runs: a fresh
// model's init_readout_scale (performer::kTrainingReadoutScale), AdamW's learning rate
// (kDefaultAdamWLearningRate), the warm-up, min(100, max(1, rounds / 10)) steps
// (docs/ARCHITECTURE.md, "Training defaults"), the verification fraction and the quarantine
// threshold. Fields the spec sets are kept.
v1::JobSpec WithJobDefaults(v1::JobSpec spec);

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_JOB_DEFAULTS_H_
