#include "server/job_defaults.h"

#include <algorithm>
#include <cstdint>

#include "performer/performer_model.h"

namespace slimfit::server {

v1::JobSpec WithJobDefaults(v1::JobSpec spec) {
  if (spec.model().has_config() && !spec.model().has_init_readout_scale()) {
    spec.mutable_model()->set_init_readout_scale(performer::kTrainingReadoutScale);
  }
  v1::Optimizer* optimizer = spec.mutable_optimizer();
  if (optimizer->has_adamw() && !optimizer->has_learning_rate()) optimizer->set_learning_rate(kDefaultAdamWLearningRate);
  if (!optimizer->has_warmup_steps()) {
    optimizer->set_warmup_steps(std::min<int64_t>(100, std::max<int64_t>(1, spec.rounds() / 10)));
  }
  if (!spec.has_verify_fraction()) spec.set_verify_fraction(kDefaultVerifyFraction);
  if (!spec.has_quarantine_after()) spec.set_quarantine_after(kDefaultQuarantineAfter);
  return spec;
}

}  // namespace slimfit::server
