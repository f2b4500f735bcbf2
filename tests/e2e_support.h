// What the end-to-end tests share: job specs, a job with a worker caught mid-round, reading a job's
// events, and what a distributed job is compared with — the same rounds run in this process (the
// same JobData order, the engine's full-sequence gradient of every sequence with the round's
// normaliser, summed in float64, the same optimizer and the same defaults). Test-only.
#ifndef SLIMFIT_TESTS_E2E_SUPPORT_H_
#define SLIMFIT_TESTS_E2E_SUPPORT_H_

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/slimfit.pb.h"
#include "tests/cluster.h"

namespace slimfit::testing_util {

// The first `bytes` of a real English text (GPL-3).
std::string Corpus(size_t bytes);

// The parameters after `spec`'s rounds trained in this process on `text` (a text/plain dataset with
// the optional document separator). `spec` as submitted: the coordinator's defaults are applied.
std::vector<at::Tensor> TrainLocally(const v1::JobSpec& spec, const std::string& text,
                                     const std::optional<std::string>& separator);

// Submits `spec` on `cluster` (coordinator and workers started) and waits up to 3 minutes for the
// job to end: the finished job, or one with an empty id (and a test failure) when it cannot be
// submitted or does not end; a job that ends other than SUCCEEDED after all rounds fails the test.
v1::Job RunToSuccess(Cluster& cluster, const v1::JobSpec& spec);

// Every event of a job (the job must be terminal: the stream then ends).
std::vector<v1::JobEvent> AllEvents(Cluster& cluster, const std::string& job_id);

// A finished job's exported parameters in model order (empty, with a test failure, when the export
// fails).
std::vector<at::Tensor> ExportedParameters(Cluster& cluster, const std::string& job_id,
                                           const v1::JobSpec& spec);

// ‖exported − TrainLocally‖ / ‖TrainLocally‖ over every parameter of a finished job.
double DistanceFromSingleProcess(Cluster& cluster, const std::string& job_id, const v1::JobSpec& spec,
                                 const std::string& text, const std::optional<std::string>& separator);

// A small job over `dataset`: a 2-layer model of width d_model, `rounds` rounds of
// `sequences_per_round` sequences of `seq_len` tokens, AdamW with clipping, 10% held out, evaluated
// every 2 rounds, checkpointed every round, seed 11.
v1::JobSpec Spec(const std::string& dataset, int64_t d_model, int64_t d_ff, int64_t seq_len,
                 int64_t sequences_per_round, int64_t rounds);

// ShardReassigned events of a finished job.
int CountReassigned(Cluster& cluster, const std::string& job_id);

// Waits until some worker reports being busy with `round` or later of `job_id`: its advertised
// address.
absl::StatusOr<std::string> BusyWorkerAddress(Cluster& cluster, const std::string& job_id, int64_t round,
                                              absl::Duration timeout);

// Two workers on a job whose rounds are long enough (~1 s) that a worker is caught in the middle
// of one: the job and the index of the worker busy with round 2 or later.
struct BusyJob {
  v1::JobSpec spec;
  std::string text;
  std::string job_id;
  int busy_worker = -1;
};
// Starts the coordinator (with `coordinator_flags`), two workers and the job. Fails the test (ASSERT)
// on the way when anything does not start.
void StartJobAndFindBusyWorker(Cluster& cluster, int64_t rounds, BusyJob* busy_job,
                               const std::vector<std::string>& coordinator_flags = {});

}  // namespace slimfit::testing_util

#endif  // SLIMFIT_TESTS_E2E_SUPPORT_H_
