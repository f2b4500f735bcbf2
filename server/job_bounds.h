// Bounds on the products of a job spec's fields that feed the job's 64-bit counters, checked at
// submission so that a job that was accepted can never overflow one while it runs:
//   - the tokens it trains on, rounds · local_steps · tokens_per_round (JobProgress.tokens_trained
//     sums every round's; a local-steps round takes local_steps batches of tokens_per_round);
//   - the batches of the data stream it walks, rounds · local_steps, and the sequences of them,
//     times tokens_per_round / sequence_length (JobData::RoundSequences' positions);
//   - the optimizer's steps, rounds · local_steps (WithJobDefaults' warm-up, the trainer's count).
// The first bounds the others (tokens_per_round ≥ sequence_length ≥ 2). Byte counters
// (JobProgress.bytes_to_workers, ...) grow with the workers that join, which no spec knows; at
// 2^63 bytes they are out of reach.
//
// Example:
//   if (absl::Status bounded = CheckCounterBounds(spec); !bounded.ok()) return bounded;
//
// Thread safety: pure function.
#ifndef SLIMFIT_SERVER_JOB_BOUNDS_H_
#define SLIMFIT_SERVER_JOB_BOUNDS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/slimfit.pb.h"

namespace slimfit::server {

// The most rounds a job of `tokens_per_round` (≥ 1) tokens per batch and `local_steps` (≥ 1;
// 1 for a synchronous job) batches per round can run: floor((2^63 − 1) / (local_steps ·
// tokens_per_round)), or 0 when one round alone is more.
int64_t MaxRounds(int64_t tokens_per_round, int64_t local_steps);

// OK when spec.rounds · local_steps · tokens_per_round fits an int64; otherwise INVALID_ARGUMENT
// naming spec.rounds (ErrorDetail.field; spec.tokens_per_round when one round alone is too much)
// with the largest number of rounds that fits. REQUIRES: rounds, tokens_per_round ≥ 1 and
// local_steps, where set, ≥ 1 (checked before: JobPreparer::Prepare).
absl::Status CheckCounterBounds(const v1::JobSpec& spec);

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_JOB_BOUNDS_H_
