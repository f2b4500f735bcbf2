// Tensors on the wire (slimfit.v1.TensorChunk, proto/slimfit.proto "Chunking"): a tensor of B
// bytes travels as ceil(B / MAX_CHUNK_BYTES) chunks, little-endian row-major in its dtype, each
// chunk repeating the tensor's name, dtype and shape and giving its byte offset.
//
//   ChunkTensors   splits named tensors into chunks, handing each to a callback (streaming: at
//                  most one chunk's bytes are held beyond the tensors themselves);
//   TensorAssembler checks chunks against an expected list of tensors (names, shapes, dtype, in
//                  order, contiguous offsets) and rebuilds them on the CPU.
//
// Thread safety: ChunkTensors is a pure function; a TensorAssembler is used by one thread.
#ifndef SLIMFIT_PERFORMER_TENSOR_CHUNKS_H_
#define SLIMFIT_PERFORMER_TENSOR_CHUNKS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "performer/plan.h"
#include "proto/slimfit.pb.h"

namespace slimfit::performer {

// Description of one tensor expected on the wire.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// The manifest entry of `spec` in `dtype`.
v1::TensorInfo ToTensorInfo(const TensorSpec& spec, DType dtype);

// Calls `emit` with every chunk of every tensor, in order. Tensors are converted to `dtype` and
// copied to the CPU one at a time. `emit` returns false to stop (e.g. the stream broke): the
// result is then CANCELLED. `max_chunk_bytes` is for tests; it is rounded down to whole elements.
// INVALID_ARGUMENT when names and tensors differ in count; INTERNAL for a LibTorch failure.
absl::Status ChunkTensors(const std::vector<std::string>& names, const std::vector<at::Tensor>& tensors,
                          DType dtype, const std::function<bool(const v1::TensorChunk&)>& emit,
                          int64_t max_chunk_bytes = v1::LIMIT_MAX_CHUNK_BYTES);

class TensorAssembler {
 public:
  // Expects exactly `specs`, in order, in `dtype`. `what` names the stream in errors
  // ("gradient of shard 3").
  TensorAssembler(std::vector<TensorSpec> specs, DType dtype, std::string what);

  // INVALID_ARGUMENT when the chunk is not the next expected piece: unknown or out-of-order name,
  // wrong dtype or shape, offset not where the previous chunk ended, empty or oversized data,
  // data past the tensor's end, or a partial element.
  absl::Status Add(const v1::TensorChunk& chunk);

  // The tensors, once every byte of every tensor has arrived (INVALID_ARGUMENT naming the first
  // incomplete tensor otherwise). CPU tensors of the expected dtype.
  absl::StatusOr<std::vector<at::Tensor>> Finish();

  int64_t bytes_received() const { return bytes_received_; }

 private:
  std::vector<TensorSpec> specs_;
  DType dtype_;
  std::string what_;
  std::vector<at::Tensor> tensors_;  // allocated when their first chunk arrives
  size_t current_ = 0;               // index of the tensor being filled
  int64_t offset_ = 0;               // bytes of it received
  int64_t bytes_received_ = 0;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_TENSOR_CHUNKS_H_
