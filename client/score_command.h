// `slimfit score`: how well a model predicts a file — the cross-entropy in bits per byte (or per
// token for a pre-tokenised file), computed as training computes its held-out loss but forward
// only, in stretches of C tokens carrying the Performer's prefix-sum front
// (performer/recurrent_model.h: ScoreTokens). Memory is that of C tokens; the file may be of any
// length.
//
//   slimfit score --model=finetuned.safetensors --data=held_out.txt --separator='\n\n'
//
// Thread safety: runs the model with the process's LibTorch threads; one at a time.
#ifndef SLIMFIT_CLIENT_SCORE_COMMAND_H_
#define SLIMFIT_CLIENT_SCORE_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace slimfit::client {

// Flags: the local model's (client/local_model.h); --data=FILE (required), --data_type (text,
// uint8, uint16, uint32, as `slimfit submit`), --separator (C escapes; default: the file is one
// document), --sequence_length (0: each document whole; L: the stream cut into sequences of L
// tokens as a training job cuts it, the state restarting at each), --stretch (512), --json.
// Text: one line, e.g.
//   "held_out.txt: 1.8421 bits per byte over 120,417 predicted bytes (1.2769 nats; 3.2 s)".
// JSON: {"model", "data", "documents", "tokens", "predicted_tokens", "loss_sum_nats",
// "nats_per_token", "bits_per_token", "bits_per_byte" (text only, else null), "sequence_length",
// "stretch", "seconds"}.
// Errors: INVALID_ARGUMENT for bad flags, a file that is not whole tokens, a token outside the
// model's vocabulary, a file that predicts nothing (every document one token long); NOT_FOUND for
// a missing file; the model's loading errors; RESOURCE_EXHAUSTED / INTERNAL from the engine.
absl::Status RunScoreCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_SCORE_COMMAND_H_
