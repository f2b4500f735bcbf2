// Tensors on the wire (slimfit.v1.TensorChunk, proto/slimfit.proto "Chunking"): a tensor of B
// bytes travels as ceil(B / MAX_CHUNK_BYTES) chunks, little-endian row-major in its dtype, each
// chunk repeating the tensor's name, dtype and shape and giving its byte offset.
//
//   ChunkTensors   splits named tensors into chunks, handing each to a callback (streaming: at
//                  most one chunk's bytes are held beyond the tensors themselves);
//   ChunkEncoded   the same for tensors already in a compressed encoding (tensor_codec.h);
//   TensorAssembler checks chunks against an expected list of tensors (names, shapes, dtype,
//                  encoding, in order, contiguous offsets) and rebuilds them on the CPU, decoding
//                  compressed chunks exactly as DecodeElements does — or, streaming, hands each
//                  chunk's values to a sink and holds nothing (the coordinator sums a large
//                  gradient into its round's sum as it arrives).
//
// Thread safety: ChunkTensors is a pure function; a TensorAssembler is used by one thread.
#ifndef SLIMFIT_WIRE_TENSOR_CHUNKS_H_
#define SLIMFIT_WIRE_TENSOR_CHUNKS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "performer/plan.h"
#include "proto/slimfit.pb.h"
#include "wire/tensor_codec.h"

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

// The tensor bytes a chunk carries: its data and (int8) 4 bytes per scale — what the protocol
// counts as bytes on the wire (RoundTiming, GradientSummary.gradient_bytes).
int64_t ChunkWireBytes(const v1::TensorChunk& chunk);

// Calls `emit` with every chunk of every encoded tensor, in order, each chunk naming `dtype` (the
// tensors' own dtype), the encoding, its offset in `dtype` bytes and (INT8) the scales of the
// blocks it covers. Chunks hold up to `max_chunk_bytes` of encoded data (INT8: whole blocks,
// at least one). Errors as ChunkTensors.
absl::Status ChunkEncoded(const std::vector<std::string>& names, const std::vector<EncodedTensor>& tensors,
                          DType dtype, const std::function<bool(const v1::TensorChunk&)>& emit,
                          int64_t max_chunk_bytes = v1::LIMIT_MAX_CHUNK_BYTES);

class TensorAssembler {
 public:
  // Expects exactly `specs`, in order, in `dtype`, every chunk in `compression` (NONE or
  // UNSPECIFIED: exact values, and chunks must not name another encoding). `what` names the
  // stream in errors ("gradient of shard 3").
  TensorAssembler(std::vector<TensorSpec> specs, DType dtype, std::string what,
                  v1::Compression compression = v1::COMPRESSION_NONE);

  // Where a streaming assembler hands every accepted chunk: the tensor's index in the specs, the
  // index of the chunk's first element in it, and its values — a contiguous CPU tensor of the
  // expected dtype, decoded when compressed, valid only during the call, to be read only (it may
  // alias the chunk's own bytes).
  // An error refuses the chunk (Add returns it, with the chunk named, in the sink's code).
  using ValueSink =
      std::function<absl::Status(size_t tensor, int64_t first_element, const at::Tensor& values)>;
  // A streaming assembler: checks chunks exactly as above, allocates no tensors, and hands each
  // chunk's values to `sink` (REQUIRES: non-empty); Finish then returns no tensors.
  TensorAssembler(std::vector<TensorSpec> specs, DType dtype, std::string what, v1::Compression compression,
                  ValueSink sink);

  // Tensors (not streaming) are allocated in unnamed files in `directory` (file_backed_tensors.h)
  // and leave the resident set as each is complete: for results held long (a spot-checked shard's,
  // until its check settles). Call before the first Add. Where a file cannot be made (the
  // receiver's disk is full, say) the tensor is allocated in memory instead — the sender did
  // nothing wrong — and file_error() says why.
  void AllocateInFiles(std::string directory) { file_directory_ = std::move(directory); }
  // The first failure to allocate a tensor in a file (OK when none).
  const absl::Status& file_error() const { return file_error_; }

  // INVALID_ARGUMENT when the chunk is not the next expected piece: unknown or out-of-order name,
  // wrong dtype, encoding or shape, offset not where the previous chunk ended, empty or oversized
  // data, data past the tensor's end, a partial element; for INT8, a chunk that does not end on
  // a block boundary (but at the tensor's end), a wrong number of scales, a negative or
  // non-finite scale, or the value −128.
  absl::Status Add(const v1::TensorChunk& chunk);

  // The tensors, once every byte of every tensor has arrived (INVALID_ARGUMENT naming the first
  // incomplete tensor otherwise). CPU tensors of the expected dtype (none when streaming). The
  // assembler gives them up: call it once.
  absl::StatusOr<std::vector<at::Tensor>> Finish();

  // Bytes of accepted chunks' data, and of their scales (4 each).
  int64_t bytes_received() const { return bytes_received_; }

 private:
  // Decodes an accepted compressed chunk of `count` elements to `out` (`count` elements of dtype_).
  absl::Status Decode(const v1::TensorChunk& chunk, int64_t count, void* out) const;
  // Hands an accepted chunk of `count` elements to sink_.
  absl::Status Stream(const v1::TensorChunk& chunk, int64_t count);

  std::vector<TensorSpec> specs_;
  DType dtype_;
  std::string what_;
  v1::Compression compression_;  // NONE for exact values
  ValueSink sink_;               // streaming when set
  std::string file_directory_;   // AllocateInFiles
  absl::Status file_error_;
  std::vector<at::Tensor> tensors_;  // allocated when their first chunk arrives (not streaming)
  std::vector<bool> started_;        // whether a chunk of each tensor arrived
  at::Tensor scratch_;               // streaming: decoded or realigned chunk values, reused
  size_t current_ = 0;               // index of the tensor being filled
  int64_t offset_ = 0;               // bytes of it received
  int64_t bytes_received_ = 0;
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_WIRE_TENSOR_CHUNKS_H_
