// What a worker checks in a ComputeGradientRequest before it runs anything (docs/PROTOCOL.md,
// "One round", step 4), as pure functions:
//
//   ValidateShardRequest  the checks that need nothing but the request: ids, round (≥ 1; ≥ 0 for
//                         an evaluate_only request, whose round is the one it follows), attempt,
//                         version, the plan (Plan::Validate(sequence_length)), the sequence length,
//                         the token encoding and byte count, the document starts, the normaliser,
//                         local steps (not with evaluate_only; per-step sequence counts summing
//                         to the shard's sequences; the inner optimizer);
//   CutShard              the tokens decoded against the model's vocabulary and cut into
//                         sequences of L tokens (the last may be shorter), each an independent
//                         PackedBatch with its own document starts;
//   CheckBudget           the plan re-predicted with the worker's own profile against its budget
//                         less the safety margin.
//
// Every INVALID_ARGUMENT names the request field at fault, in the message and in an attached
// ErrorDetail.field ("plan", "doc_starts", "tokens", ...). RESOURCE_EXHAUSTED carries an
// ErrorDetail with required_bytes, budget_bytes and usable_bytes.
//
// Thread safety: pure functions.
#ifndef SLIMFIT_WORKER_SHARD_REQUEST_H_
#define SLIMFIT_WORKER_SHARD_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "performer/model_config.h"
#include "performer/packed_batch.h"
#include "performer/plan.h"
#include "planner/cost_model.h"
#include "planner/device_profile.h"
#include "proto/slimfit.pb.h"

namespace slimfit::worker {

// The share of the budget a worker keeps free: plans must predict at most
// floor(budget · (1 − kSafetyMargin)). Also the default margin of the Worker.Plan RPC.
inline constexpr double kSafetyMargin = 0.10;

// floor(budget · (1 − kSafetyMargin)).
int64_t UsableBytes(int64_t memory_budget_bytes);

// INVALID_ARGUMENT with ErrorDetail.field = `field` and the message "<field>: <message>".
absl::Status InvalidField(absl::string_view field, absl::string_view message);

// The request's plan, parsed and validated for its sequence_length, after every check that
// needs neither the model nor the worker's state. INVALID_ARGUMENT naming the field otherwise.
[[nodiscard]] absl::StatusOr<performer::Plan> ValidateShardRequest(const v1::ComputeGradientRequest& request);

struct Shard {
  // Consecutive sequences of sequence_length tokens, the last 1..L; each starts a document.
  std::vector<performer::PackedBatch> sequences;
  int64_t tokens = 0;
  // Most documents in any one sequence (the memory model's `documents`).
  int64_t max_documents = 1;
};

// REQUIRES: ValidateShardRequest(request) succeeded, without local_data. INVALID_ARGUMENT
// ("tokens: ...") for a token id ≥ vocab.
[[nodiscard]] absl::StatusOr<Shard> CutShard(const v1::ComputeGradientRequest& request, int64_t vocab);

// A local_data shard's tokens and document starts as the worker read them (LocalDataReader::Read)
// → sequences, as CutShard. FAILED_PRECONDITION ("local_data: ...") for a token id ≥ vocab: the
// worker's own file does not fit the job's model.
[[nodiscard]] absl::StatusOr<Shard> CutLocalShard(const std::vector<int64_t>& tokens,
                                                  const std::vector<int64_t>& doc_starts,
                                                  int64_t sequence_length, int64_t vocab);

// The request's sequences in shard order: `local[e]` holds the sequences of local_data[e] as the
// worker read and cut them (CutLocalShard), placed at that entry's positions, and `tokens` (CutShard)
// fills the other places in order. Without local_data, CutShard. REQUIRES: ValidateShardRequest
// succeeded and local has one shard per local_data entry, each with that entry's sequence count.
[[nodiscard]] absl::StatusOr<Shard> AssembleShard(const v1::ComputeGradientRequest& request, int64_t vocab,
                                                  std::vector<Shard> local);

// Tokens (ids already checked) and document starts (offsets, increasing) cut into sequences of
// `sequence_length` tokens, the last possibly shorter.
Shard CutSequences(const std::vector<int64_t>& tokens, const std::vector<int64_t>& doc_starts,
                   int64_t sequence_length);

// `plan` for one sequence of `length` tokens: the slice clamped to the length (the proto's rule
// for a last sequence shorter than C).
performer::Plan PlanForSequence(const performer::Plan& plan, int64_t length);

struct BudgetCheck {
  // Of one sequence of L tokens; with Workload::gradient_sum (a second gradient buffer) when the
  // shard has several sequences and a gradient is wanted.
  planner::Prediction prediction;
  // prediction.peak_bytes.
  int64_t needed_bytes = 0;
  int64_t usable_bytes = 0;
};

// Re-predicts `plan` for Workload{model, sequence_length, shard.max_documents} with `profile`.
// RESOURCE_EXHAUSTED "plan needs 41.2 MiB (predicted peak) but worker w-3f2a budget allows
// 28.8 MiB (32.0 MiB less a 10% margin)" with ErrorDetail{required_bytes, budget_bytes,
// usable_bytes} when needed > usable; INVALID_ARGUMENT ("plan: ...") when the cost model refuses
// the plan. `worker_name` names the worker in the message. `extra_bytes` (≥ 0) are added to the
// plan's peak: what a local-steps shard holds beside it (performer::LocalStepsExtraBytes).
[[nodiscard]] absl::StatusOr<BudgetCheck> CheckBudget(const performer::ModelConfig& model,
                                                      const performer::Plan& plan, int64_t sequence_length,
                                                      const Shard& shard, bool gradient_wanted,
                                                      int64_t memory_budget_bytes,
                                                      const planner::DeviceProfile& profile,
                                                      absl::string_view worker_name, int64_t extra_bytes = 0);

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_SHARD_REQUEST_H_
