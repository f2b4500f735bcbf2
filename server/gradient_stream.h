// Reading one ComputeGradient answer on the coordinator: every message is counted (bytes on the
// wire), gradient chunks go into a TensorAssembler as they arrive, and the closing summary is
// kept. The first protocol error (a chunk the assembler refuses, a chunk of an evaluation, a chunk
// after the summary) cancels the call and is kept; later messages are drained and counted only.
// Shared by the shard dispatcher and //bench:gradient_ingest, so the bench measures the path the
// coordinator runs.
//
// Thread safety: one call per stream; streams may be read concurrently.
#ifndef SLIMFIT_SERVER_GRADIENT_STREAM_H_
#define SLIMFIT_SERVER_GRADIENT_STREAM_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "proto/slimfit.pb.h"
#include "wire/tensor_chunks.h"

namespace slimfit::server {

struct GradientStream {
  int64_t bytes = 0;                           // serialized size of every message read
  std::optional<v1::GradientSummary> summary;  // the last summary, if any arrived
  absl::Status error;                          // the first protocol error (the call was cancelled)
};

// Reads `reader` to its end (the caller then calls Finish). REQUIRES: `context` is the call's.
// `before_first_chunk` (may be empty) runs once, when the first gradient chunk has arrived and
// before it is assembled: the shard dispatcher waits there for its turn to hold an assembled
// gradient (the worker's further writes wait in gRPC's flow control meanwhile).
GradientStream ReadGradientStream(grpc::ClientReaderInterface<v1::ComputeGradientResponse>* reader,
                                  grpc::ClientContext* context, performer::TensorAssembler* assembler,
                                  bool evaluate_only, const std::function<void()>& before_first_chunk = {});

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_GRADIENT_STREAM_H_
