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
  if (optimizer->has_adamw() && !optimizer->has_learning_rate())
    optimizer->set_learning_rate(kDefaultAdamWLearningRate);
  // With local steps the optimizer is the workers' inner one: each takes rounds · local_steps steps.
  const int64_t steps =
      spec.has_local_steps() ? spec.rounds() * std::max(1, spec.local_steps()) : spec.rounds();
  if (!optimizer->has_warmup_steps()) {
    optimizer->set_warmup_steps(std::min<int64_t>(100, std::max<int64_t>(1, steps / 10)));
  }
  if (spec.has_local_steps()) {
    v1::Optimizer* outer = spec.mutable_outer_optimizer();
    if (outer->kind_case() == v1::Optimizer::KIND_NOT_SET) outer->mutable_sgd();
    if (outer->has_sgd()) {
      v1::Sgd* sgd = outer->mutable_sgd();
      if (!sgd->has_momentum()) sgd->set_momentum(kDefaultOuterMomentum);
      if (!sgd->has_nesterov()) sgd->set_nesterov(sgd->momentum() > 0);
      if (!outer->has_learning_rate()) outer->set_learning_rate(kDefaultOuterLearningRate);
    } else if (!outer->has_learning_rate()) {
      outer->set_learning_rate(kDefaultAdamWLearningRate);
    }
    if (!outer->has_warmup_steps()) outer->set_warmup_steps(0);
  }
  // Spot checks compare two workers' results of one shard: local steps depend on each worker's
  // own inner optimizer, so they are off unless asked for (and then refused).
  if (!spec.has_verify_fraction())
    spec.set_verify_fraction(spec.has_local_steps() ? 0 : kDefaultVerifyFraction);
  if (!spec.has_quarantine_after()) spec.set_quarantine_after(kDefaultQuarantineAfter);
  v1::UpdateCompression* compression = spec.mutable_compression();
  if (compression->pseudo_gradients() == v1::COMPRESSION_UNSPECIFIED) {
    compression->set_pseudo_gradients(v1::COMPRESSION_NONE);
  }
  if (compression->parameters() == v1::COMPRESSION_UNSPECIFIED)
    compression->set_parameters(v1::COMPRESSION_NONE);
  return spec;
}

}  // namespace slimfit::server
