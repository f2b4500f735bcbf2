// The model in its recurrent form: what a trained Performer is used for after training.
//
// A causal Performer needs no key/value cache: everything a token sees of the past is each layer's
// prefix-sum front (Likhosherstov et al., eq. 2–3: Σ φk ⊗ v and Σ φk), k·M·(d + 1) numbers per
// layer whatever the length. Two uses, both through the same row-wise maps F and G and the same
// prefix attention as training (performer_model.h, prefix_attention.h), so they agree with the
// gradient engine's loss to rounding:
//
//   ScoreTokens   Σ cross-entropy of a packed token stream of any length, run forward in stretches
//                 of C tokens carrying the front — the forward sweep of the sliced algorithm, with
//                 memory of a length-C computation (bits per byte of a file: `slimfit score`).
//   RecurrentModel  one document token by token (or a prompt at once), keeping only the fronts:
//                 next-token log-probabilities for sampling (`slimfit generate`).
//
// Example:
//   absl::StatusOr<RecurrentModel> decoder = RecurrentModel::Create(model, /*feature_seed=*/0);
//   absl::StatusOr<at::Tensor> log_probs = decoder->Feed(prompt_tokens);   // [vocab], float64, CPU
//   while (...) { int64_t next = sample(*log_probs); log_probs = decoder->Feed({next}); }
//
// Thread safety: ScoreTokens is a pure function of its arguments and may run concurrently on one
// model. A RecurrentModel holds mutable state and is used by one thread at a time; it shares the
// model's parameter storage (never modified).
#ifndef SLIMFIT_PERFORMER_RECURRENT_MODEL_H_
#define SLIMFIT_PERFORMER_RECURRENT_MODEL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "performer/packed_batch.h"
#include "performer/performer_model.h"
#include "performer/prefix_attention.h"

namespace slimfit::performer {

struct ForwardOptions {
  // Tokens run at once (C): activations of a stretch of C tokens are the memory that grows with C;
  // nothing grows with the input's length. REQUIRES: ≥ 1.
  int64_t stretch = 512;
  // FAVOR+ random features are drawn from this seed (SampleFavorProjections), as in training:
  // a favor+ model must be run with the seed it was trained with (its checkpoint's "feature_seed").
  uint64_t feature_seed = 0;
};

struct ScoreResult {
  double loss_sum = 0;           // Σ cross-entropy (nats) over the predicted tokens
  int64_t predicted_tokens = 0;  // every token but the first of each document
  double seconds = 0;

  double nats_per_token() const { return predicted_tokens == 0 ? 0.0 : loss_sum / predicted_tokens; }
  double bits_per_token() const;
};

// Errors: INVALID_ARGUMENT for a bad batch (ValidatePackedBatch) or stretch < 1; RESOURCE_EXHAUSTED
// when the device runs out of memory; INTERNAL for other LibTorch failures, with context.
absl::StatusOr<ScoreResult> ScoreTokens(const PerformerModel& model, const PackedBatch& batch,
                                        const ForwardOptions& options);

class RecurrentModel {
 public:
  // INVALID_ARGUMENT for stretch < 1.
  static absl::StatusOr<RecurrentModel> Create(const PerformerModel& model,
                                               const ForwardOptions& options = {});

  // Appends `tokens` to the current document and returns the log-probabilities of the token that
  // follows the last of them: float64 [vocab] on the CPU. Runs in stretches of options.stretch.
  // INVALID_ARGUMENT (state unchanged) for an empty span or a token outside [0, vocab);
  // RESOURCE_EXHAUSTED / INTERNAL as ScoreTokens.
  absl::StatusOr<at::Tensor> Feed(absl::Span<const int64_t> tokens);

  // Starts a new document: fronts to zero, position 0.
  void Reset();

  // Tokens of the current document fed so far.
  int64_t position() const { return position_; }
  // Bytes of the recurrent state (every layer's front): constant in position().
  int64_t state_bytes() const;

 private:
  RecurrentModel(const PerformerModel& model, const ForwardOptions& options);

  PerformerModel model_;  // shares the caller's parameter storage
  ForwardOptions options_;
  ModelWeights weights_;
  std::vector<at::Tensor> projections_;
  std::vector<Front> fronts_;  // one per layer
  int64_t position_ = 0;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_RECURRENT_MODEL_H_
