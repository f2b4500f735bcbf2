// Tensor values in the protocol's lossy wire encodings (slimfit.v1.Compression, common.proto):
// float16, bfloat16, and int8 with one float32 scale per block of LIMIT_INT8_BLOCK_ELEMENTS
// elements. Used for pseudo-gradients (worker → coordinator, with error feedback kept by the
// sender) and parameter differences (coordinator → worker) of jobs that allow it.
//
//   EncodeTensor    a tensor's values → an EncodedTensor (the bytes and scales that travel);
//   DecodeElements  a run of encoded elements → float32, exactly as every receiver rebuilds them;
//   DecodeTensor    a whole EncodedTensor → a float32 CPU tensor (= DecodeElements over it);
//   AddDifference   base + decoded difference in base's dtype: how a parameter version is rebuilt
//                   from the previous one, by the coordinator and every worker alike;
//   EncodeDifference the next version as an encoded difference and the version it defines.
//
// Decoding is defined element by element (a conversion, or q · scale as one float32 product), so
// sender and receivers agree bit for bit on every platform; the sender's error feedback and the
// coordinator's published parameters rely on it.
//
// Error bounds (tests check them): float16 |x − x̂| ≤ 2⁻¹¹|x| (normal range); bfloat16
// ≤ 2⁻⁸|x|; int8 ≤ s/2 = max|block| / 254, up to float32 rounding of s, x/s and q·s (normal
// range; a block whose magnitude is below 127 × the smallest float32 gets scale 0 and decodes
// to zeros).
//
// Thread safety: pure functions.
#ifndef SLIMFIT_WIRE_TENSOR_CODEC_H_
#define SLIMFIT_WIRE_TENSOR_CODEC_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/slimfit.pb.h"

namespace slimfit::performer {

// True for FLOAT16, BFLOAT16 and INT8; false for NONE and UNSPECIFIED (exact values).
bool IsCompressed(v1::Compression compression);
// Bytes per element on the wire of a compressed encoding (2, 2, 1); 0 otherwise.
int64_t CompressedElementBytes(v1::Compression compression);
// "int8", "float16", "bfloat16", "none" (unspecified is "none"): CLI and logs.
std::string CompressionName(v1::Compression compression);
// The encoding named `name` (as CompressionName), INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<v1::Compression> CompressionFromName(absl::string_view name);

// One tensor's values in a compressed encoding.
struct EncodedTensor {
  std::vector<int64_t> shape;
  v1::Compression compression = v1::COMPRESSION_UNSPECIFIED;
  std::string data;           // numel() · CompressedElementBytes(compression) bytes
  std::vector<float> scales;  // INT8: ceil(numel() / LIMIT_INT8_BLOCK_ELEMENTS) scales; empty otherwise

  int64_t numel() const;
  // Bytes on the wire: data and scales.
  int64_t wire_bytes() const { return static_cast<int64_t>(data.size() + 4 * scales.size()); }
};

// `values` (any floating dtype, any device; converted to float32 on the CPU) in `compression`
// (which IsCompressed). INVALID_ARGUMENT naming the first non-finite value, or a value that would
// decode to infinity (beyond float16's or bfloat16's range; an int8 block near FLT_MAX);
// INTERNAL for a LibTorch failure.
absl::StatusOr<EncodedTensor> EncodeTensor(const at::Tensor& values, v1::Compression compression);

// Decodes `count` elements from `data` (count · CompressedElementBytes bytes) into `out`.
// INT8: `scales` holds the scales of the blocks the run covers, starting with the block of its
// first element, which must start a block. INVALID_ARGUMENT when sizes disagree, a scale is
// negative or not finite, or an int8 value is −128.
absl::Status DecodeElements(v1::Compression compression, absl::string_view data,
                            absl::Span<const float> scales, int64_t count, float* out);

// The whole tensor, float32 on the CPU. INVALID_ARGUMENT as DecodeElements.
absl::StatusOr<at::Tensor> DecodeTensor(const EncodedTensor& encoded);

// base + difference, computed in base's dtype on base's device (difference converted to them).
// INTERNAL for a LibTorch failure (shapes that do not match, say).
absl::StatusOr<at::Tensor> AddDifference(const at::Tensor& base, const at::Tensor& difference);

// The next parameter version as a difference to `base` (parameter compression): target − base
// encoded, and the version that encoding defines — base + decoded difference, which every holder of
// `base` rebuilds bit for bit — with its SHA-256. What the encoding loses is target − rebuilt.
struct EncodedDifference {
  std::vector<EncodedTensor> encoded;  // one per tensor, in order
  std::vector<at::Tensor> rebuilt;     // base's dtype, on the CPU
  std::string sha256;                  // TensorsSha256(rebuilt)
};
// `base` and `target` hold the same shapes in order; `target` may live elsewhere and in another
// dtype (it is converted to base's). INVALID_ARGUMENT naming the tensor index for a difference
// that cannot be encoded (EncodeTensor) or tensors that do not match; INTERNAL for LibTorch.
absl::StatusOr<EncodedDifference> EncodeDifference(const std::vector<at::Tensor>& base,
                                                   const std::vector<at::Tensor>& target,
                                                   v1::Compression compression);

// SHA-256 (lowercase hex) of the tensors' bytes, each little-endian row-major in its own dtype,
// concatenated in order: how sender and receivers check they hold the same parameters.
// INTERNAL for a LibTorch failure.
absl::StatusOr<std::string> TensorsSha256(const std::vector<at::Tensor>& tensors);

}  // namespace slimfit::performer

#endif  // SLIMFIT_WIRE_TENSOR_CODEC_H_
