// Fuzz target: tensor chunk streams from the wire (wire/tensor_chunks.h TensorAssembler), as
// a worker receives parameters (FetchParameters) and the coordinator receives gradients
// (ComputeGradient).
//
// Input: byte 0 picks the dtype (bit 0), 1..4 expected tensors (bits 1-2) and the stream's
// encoding (bits 3-4: exact, float16, bfloat16, int8); each expected tensor then takes one byte
// for its rank (0..3) and one per dimension (1..8, int8 streams 1..40 so blocks of 256 split); the
// rest is a sequence of chunks, each a control byte and then:
//   control bit 0 = 1: a well-formed next chunk (name, dtype, shape, encoding and offset of the
//     tensor being filled), with (next byte) + 1 elements of data taken from the input (int8: as
//     many scales as its blocks, one input byte each, and, when bit 2 is set, one scale too many)
//     and, when bit 1 is set, its offset moved by (next byte) − 128;
//   control bit 0 = 0: a two-byte length and that many bytes of a binary slimfit.v1.TensorChunk.
// Invariants: Add refuses with INVALID_ARGUMENT and then receives nothing from that chunk;
// bytes_received counts accepted data (and 4 bytes per scale); Finish refuses with
// INVALID_ARGUMENT or returns CPU tensors of the expected shapes and dtype holding exactly the
// data accepted — for an encoded stream, what DecodeElements makes of the accepted data and
// scales — and an exact stream's tensors ChunkTensors re-chunks into a stream a new assembler
// accepts and rebuilds identically.
#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fuzz/fuzz_support.h"
#include "wire/tensor_chunks.h"

namespace slimfit::fuzz {
namespace {

// Reads the input front to back; a read past the end gives zeros.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return position_ >= size_; }
  uint8_t Byte() { return position_ < size_ ? data_[position_++] : 0; }
  std::string Bytes(size_t n) {
    n = std::min(n, size_ - std::min(position_, size_));
    std::string bytes(reinterpret_cast<const char*>(data_ + position_), n);
    position_ += n;
    return bytes;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

}  // namespace
}  // namespace slimfit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace slimfit;  // NOLINT
  using fuzz::Reader;
  Reader in(data, size);
  const uint8_t header = in.Byte();
  const performer::DType dtype = (header & 1) ? performer::DType::kFloat64 : performer::DType::kFloat32;
  const int64_t element = performer::DTypeBytes(dtype);
  std::vector<performer::TensorSpec> specs(1 + ((header >> 1) & 3));
  const v1::Compression encodings[] = {v1::COMPRESSION_NONE, v1::COMPRESSION_FLOAT16,
                                       v1::COMPRESSION_BFLOAT16, v1::COMPRESSION_INT8};
  const v1::Compression compression = encodings[(header >> 3) & 3];
  const bool encoded = compression != v1::COMPRESSION_NONE;
  const int64_t wire_element = encoded ? performer::CompressedElementBytes(compression) : element;
  const int64_t block = v1::LIMIT_INT8_BLOCK_ELEMENTS;
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].name = i % 2 == 0 ? absl::StrCat("layers.", i, ".weight") : absl::StrCat("layers.", i, ".bias");
    const int rank = in.Byte() % 4;
    for (int d = 0; d < rank; ++d) {
      specs[i].shape.push_back(1 + in.Byte() % (compression == v1::COMPRESSION_INT8 ? 40 : 8));
    }
  }

  performer::TensorAssembler assembler(specs, dtype, "fuzzed stream", compression);
  // What the stream should rebuild: the accepted data (and scales), tensor by tensor.
  std::vector<std::string> accepted(specs.size());
  std::vector<std::vector<float>> accepted_scales(specs.size());
  size_t current = 0;  // the tensor the well-formed chunks fill
  for (int chunks = 0; !in.done() && chunks < 64; ++chunks) {
    const uint8_t control = in.Byte();
    v1::TensorChunk chunk;
    if (control & 1) {
      while (current < specs.size() && static_cast<int64_t>(accepted[current].size()) ==
                                           fuzz::Elements(specs[current].shape) * wire_element) {
        ++current;
      }
      const performer::TensorSpec& spec = specs[std::min(current, specs.size() - 1)];
      chunk.set_name(spec.name);
      chunk.set_dtype(dtype == performer::DType::kFloat64 ? v1::DTYPE_FLOAT64 : v1::DTYPE_FLOAT32);
      if (encoded) chunk.set_compression(compression);
      for (int64_t d : spec.shape) chunk.add_shape(d);
      int64_t offset = current < specs.size()
                           ? static_cast<int64_t>(accepted[current].size()) / wire_element * element
                           : 0;
      const size_t elements = 1 + in.Byte();
      if (control & 2) offset += static_cast<int64_t>(in.Byte()) - 128;
      chunk.set_offset(offset);
      chunk.set_data(in.Bytes(elements * static_cast<size_t>(wire_element)));
      if (compression == v1::COMPRESSION_INT8) {
        const int64_t count = static_cast<int64_t>(chunk.data().size());
        const int64_t scales = (count + block - 1) / block + ((control & 4) ? 1 : 0);
        for (int64_t b = 0; b < scales; ++b) chunk.add_scales(static_cast<float>(in.Byte()) / 16.0f);
      }
    } else {
      const size_t length = in.Byte() | (static_cast<size_t>(in.Byte()) << 8);
      if (!chunk.ParseFromString(in.Bytes(length))) continue;
    }
    const int64_t before = assembler.bytes_received();
    const absl::Status added = assembler.Add(chunk);
    if (!added.ok()) {
      SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(added), added.ToString());
      SLIMFIT_FUZZ_CHECK(assembler.bytes_received() == before, "a refused chunk was counted");
      continue;
    }
    SLIMFIT_FUZZ_CHECK(assembler.bytes_received() ==
                           before + static_cast<int64_t>(chunk.data().size()) + 4 * chunk.scales_size(),
                       "bytes_received");
    size_t index = 0;
    while (index < specs.size() && specs[index].name != chunk.name()) ++index;
    SLIMFIT_FUZZ_CHECK(index < specs.size(), "accepted a chunk of unknown tensor '", chunk.name(), "'");
    SLIMFIT_FUZZ_CHECK(
        chunk.offset() == static_cast<int64_t>(accepted[index].size()) / wire_element * element,
        "accepted offset ", chunk.offset(), " after ", accepted[index].size(), " bytes");
    accepted[index] += chunk.data();
    accepted_scales[index].insert(accepted_scales[index].end(), chunk.scales().begin(), chunk.scales().end());
  }

  absl::StatusOr<std::vector<at::Tensor>> tensors = assembler.Finish();
  if (!tensors.ok()) {
    SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(tensors.status()), tensors.status().ToString());
    return 0;
  }
  SLIMFIT_FUZZ_CHECK(tensors->size() == specs.size(), "tensor count");
  std::vector<std::string> names;
  for (size_t i = 0; i < specs.size(); ++i) {
    const at::Tensor& t = (*tensors)[i];
    SLIMFIT_FUZZ_CHECK(
        t.device().is_cpu() && t.is_contiguous() && t.sizes().vec() == specs[i].shape &&
            t.scalar_type() == (dtype == performer::DType::kFloat64 ? at::kDouble : at::kFloat),
        "tensor ", i, " layout");
    if (encoded) {
      const int64_t count = static_cast<int64_t>(accepted[i].size()) / wire_element;
      SLIMFIT_FUZZ_CHECK(count == t.numel(), "tensor ", i, ": ", count, " accepted elements for ", t.numel());
      std::vector<float> decoded(static_cast<size_t>(count));
      const absl::Status ok =
          performer::DecodeElements(compression, accepted[i], accepted_scales[i], count, decoded.data());
      SLIMFIT_FUZZ_CHECK(ok.ok(), "tensor ", i, ": the accepted data does not decode: ", ok.ToString());
      const at::Tensor expected = at::from_blob(decoded.data(), {count}, at::kFloat).to(t.scalar_type());
      SLIMFIT_FUZZ_CHECK(fuzz::SameBytes(t.reshape({count}).contiguous(), expected), "tensor ", i,
                         " holds other values than its accepted data decodes to");
    } else {
      SLIMFIT_FUZZ_CHECK(
          t.nbytes() == accepted[i].size() && std::memcmp(t.data_ptr(), accepted[i].data(), t.nbytes()) == 0,
          "tensor ", i, " holds other bytes than were accepted");
    }
    names.push_back(specs[i].name);
  }
  if (encoded) return 0;

  // Re-chunked (in small chunks, to cross chunk boundaries) and rebuilt: the same tensors.
  performer::TensorAssembler again(specs, dtype, "re-chunked stream");
  absl::Status chunked = performer::ChunkTensors(
      names, *tensors, dtype, [&](const v1::TensorChunk& chunk) { return again.Add(chunk).ok(); }, 24);
  SLIMFIT_FUZZ_CHECK(chunked.ok(), chunked.ToString());
  absl::StatusOr<std::vector<at::Tensor>> rebuilt = again.Finish();
  SLIMFIT_FUZZ_CHECK(rebuilt.ok(), rebuilt.status().ToString());
  for (size_t i = 0; i < specs.size(); ++i) {
    SLIMFIT_FUZZ_CHECK(fuzz::SameBytes((*rebuilt)[i], (*tensors)[i]), "re-chunked tensor ", i, " differs");
  }
  return 0;
}
