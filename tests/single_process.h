// What the end-to-end tests compare a distributed job with: the same rounds run in this process
// (the same JobData order, the engine's full-sequence gradient of every sequence with the round's
// normaliser, summed in float64, the same optimizer and the same defaults), and small helpers to
// read a job's result and events. Test-only.
#ifndef SLIMFIT_TESTS_SINGLE_PROCESS_H_
#define SLIMFIT_TESTS_SINGLE_PROCESS_H_

#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "proto/slimfit.pb.h"
#include "tests/cluster.h"

namespace slimfit::testing_util {

// The first `bytes` of a real English text (GPL-3).
std::string Corpus(size_t bytes);

// The parameters after `spec`'s rounds trained in this process on `text` (a text/plain dataset with
// the optional document separator). `spec` as submitted: the coordinator's defaults are applied.
std::vector<at::Tensor> TrainLocally(const v1::JobSpec& spec, const std::string& text,
                                     const std::optional<std::string>& separator);

// Every event of a job (the job must be terminal: the stream then ends).
std::vector<v1::JobEvent> AllEvents(Cluster& cluster, const std::string& job_id);

// ‖exported − TrainLocally‖ / ‖TrainLocally‖ over every parameter of a finished job.
double DistanceFromSingleProcess(Cluster& cluster, const std::string& job_id, const v1::JobSpec& spec,
                                 const std::string& text, const std::optional<std::string>& separator);

}  // namespace slimfit::testing_util

#endif  // SLIMFIT_TESTS_SINGLE_PROCESS_H_
