// `slimfit plan --arch=transformer`: the memory an ordinary softmax transformer needs to train on
// a batch — three attention layouts (naive, FlashAttention, padding-free) times four
// recomputation strategies, plus parameters, gradients and Adam state — from
// planner/transformer_baselines.h. The comparison point for the sliced Performer plans of
// `slimfit plan` (client/plan_command.h), which dispatches here.
//
//   slimfit plan --arch=transformer --d_model=1024 --layers=24 --heads=16 --vocab=50304
//       --batch=8 --seq_len=4096
//   slimfit plan --arch=transformer --d_model=1024 --layers=24 --heads=16
//       --length_distribution=lengths.txt
//
// Thread safety: reads the lengths file, writes to `out`; otherwise pure.
#ifndef SLIMFIT_CLIENT_TRANSFORMER_PLAN_COMMAND_H_
#define SLIMFIT_CLIENT_TRANSFORMER_PLAN_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace slimfit::client {

// Flags: --arch=transformer; --d_model, --layers, --heads (required); --d_ff (0 = 4·d_model);
// --vocab (0 = no embedding in the model state); the batch either --length_distribution=uniform
// (the default) with --batch=B --seq_len=L (B lengths uniform in 1..L, expectations) or
// --length_distribution=FILE, one length per line (ParseLengthsFile; write ./uniform for a file of
// that name), when --batch and --seq_len are refused; --bytes_per_element (activations, default 2),
// --parameter_bytes_per_element (parameters and gradients, default 4), --optimizer=adam|none
// (default adam: two fp32 moments), --dropout / --nodropout (default on: masks cached), --json.
// Text: a summary of the model and the batch, then FormatBaselineTable. JSON: arch, model
// {d_model, layers, heads, d_ff, vocab, parameters}, batch {distribution "uniform" or "file",
// path (file only), sequences, max_length, max_length_squared, tokens, sum_squared_lengths —
// expectations for uniform}, bytes_per_element, parameter_bytes_per_element, optimizer, dropout,
// baselines (client/json_output.h BaselineRowsToJson).
// Errors: INVALID_ARGUMENT for bad flags or values (the validators' messages name the field),
// and a lengths file's parse errors prefixed with its path; NOT_FOUND for a missing file.
absl::Status RunTransformerPlanCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_TRANSFORMER_PLAN_COMMAND_H_
