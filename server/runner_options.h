// How a coordinator runs jobs: shard deadlines and attempts, plan margins. Filled from the
// coordinator's flags (coordinator_daemon.h); read by the job runner, its worker planner and its
// shard dispatcher.
#ifndef SLIMFIT_SERVER_RUNNER_OPTIONS_H_
#define SLIMFIT_SERVER_RUNNER_OPTIONS_H_

#include <cstdint>

#include "absl/time/time.h"

namespace slimfit::server {

struct RunnerOptions {
  // A shard's deadline: this plus 10× its predicted compute time.
  absl::Duration shard_timeout = absl::Seconds(120);
  int max_attempts = 5;  // per shard, then the job fails
  // The most sequences in one shard; 0: as many as fit one request. Smaller shards balance load and
  // lose less to a failed worker, at the cost of more calls.
  int64_t max_sequences_per_shard = 0;
  // Bytes of workers' gradients a job assembles at once: a shard waits for room (its worker's further
  // writes wait in gRPC's flow control) unless nothing else is being assembled. Small models
  // assemble every shard at once; at 100M parameters (371 MB a shard) one at a time.
  int64_t max_assembly_bytes = int64_t{512} << 20;
  // A shard whose gradient is at least this many bytes is summed as it arrives, chunk by chunk,
  // instead of being assembled first: no copy of it is held (the coordinator's memory is the
  // parameters, the optimizer's state and the sum). Such a shard cannot be taken back out: when
  // its stream fails midway, or it is refused at its end, the round is computed again (assembling
  // every shard) and that worker's shards are assembled from then on. Spot-checked shards, workers with a
  // strike and local-steps rounds (never computed again: the workers' inner optimizers would step twice) are
  // always assembled.
  int64_t stream_into_sum_bytes = int64_t{128} << 20;
  // Where what the coordinator touches only now and then is kept: unnamed files in this directory
  // (performer/file_backed_tensors.h), resident only while a pass works on them, a tensor at a
  // time — AdamW's moments (performer::Trainer::KeepOptimizerStateIn; the step and checkpoints
  // pass over them) and spot-checked shards' results while they wait for their check. The
  // coordinator then holds 2× the parameter bytes in tensors instead of 4× (6× in a round with a
  // spot check), for a pass over 2× of page cache or disk a step. Empty: in memory.
  std::string offload_directory;
  double safety_margin = 0.10;  // plans keep predicted peaks under (1 − margin) · budget
  // Replan a worker when its measured peak exceeds the prediction by this factor.
  double replan_ratio = 1.25;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_RUNNER_OPTIONS_H_
