// `slimfit submit`: uploads datasets (and an initial checkpoint) and submits a training job
// (docs/PROTOCOL.md, "Job submission").
//
//   slimfit submit job.textproto --data corpus.txt --separator '\n\n'
//   slimfit submit --data a.txt,b.txt --d_model=128 --layers=2 --heads=4 --sequence_length=1024
//       --tokens_per_round=65536 --rounds=200 --learning_rate=3e-4 --watch
//
// The job spec is a text-format slimfit.v1.JobSpec (JOB.textproto, optional) with the flags given
// written over it: --name, --sequence_length, --tokens_per_round, --rounds, --learning_rate,
// --optimizer=adamw|sgd, --warmup_steps, --weight_decay, --gradient_clip_norm, --seed,
// --min_workers, --held_out_fraction, --eval_interval, --checkpoint_interval, --dtype and the model
// shape (client/model_flags.h). Then, in this order, nothing having been sent before every input
// was checked:
//   1. each --data file (repeatable, or comma-separated) is uploaded with UploadDataset as
//      --data_type (text: text/plain; uint8/uint16/uint32: pre-tokenised ids) with the
//      --separator between documents, and its dataset id appended to spec.dataset_ids;
//   2. --init uploads a checkpoint (.safetensors or .pt/.pth) and sets spec.model.checkpoint
//      .upload_id, the model shape from the spec and flags becoming the checkpoint's config;
//   3. SubmitJob{spec, request_id} — --request_id, by default a fresh random id, so that a retry
//      after UNAVAILABLE returns the same job.
// Defaults filled in by the client: without a model in the spec, --init or model flags, a fresh
// model of the default shape; without an optimizer kind, AdamW.
//
// Output: one line per upload and the job's summary line, or with --json the Job as proto3 JSON.
// --watch then follows the job as `slimfit watch` does (and exits as it does); with --json every
// line is then one JSON object: the Job, then each event.
// Errors: INVALID_ARGUMENT for bad flags, a malformed spec ("FILE:LINE:COLUMN: <parser message>")
// or a job without data; NOT_FOUND for a missing file; the coordinator's status otherwise.
//
// Thread safety: runs on the caller's thread.
#ifndef SLIMFIT_CLIENT_SUBMIT_COMMAND_H_
#define SLIMFIT_CLIENT_SUBMIT_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/slimfit.pb.h"

namespace slimfit::client {

// Reads a text-format JobSpec. NOT_FOUND (or the errno's code) when the file cannot be read;
// INVALID_ARGUMENT "PATH:LINE:COLUMN: <message>" (1-based) for the first parse error, or
// "PATH: <field> is not valid UTF-8" for a string field the coordinator could not parse.
absl::StatusOr<v1::JobSpec> ReadJobSpec(const std::string& path);

// A random idempotency key in the form of a version-4 UUID ("3f2a…-…").
std::string RandomRequestId();

// The command. `terminal`: stdout is a terminal (for --watch). Writes as it goes
// (Command::streams_output), so that --watch shows events as they arrive.
absl::Status RunSubmitCommand(absl::Span<const std::string> args, std::ostream& out, bool terminal);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_SUBMIT_COMMAND_H_
