// Test helpers shared by tensor_codec_test.cc (names, sizes, error bounds, exact values, refusals)
// and tensor_codec_feedback_test.cc (AddDifference, error feedback): the encodings under test,
// float32 values over many orders of magnitude, encode/decode that fail the calling test on an
// error, and int8's error bound. Test-only (testonly = 1).
//
// Example:
//   at::Tensor x = BlockSpreadValues(1000);
//   at::Tensor decoded = RoundTrip(x, v1::COMPRESSION_INT8);
//
// Thread safety: the value generators draw from LibTorch's global generator (seed it with
// at::manual_seed in each test); the rest are pure functions.
#ifndef SLIMFIT_WIRE_TENSOR_CODEC_TEST_SUPPORT_H_
#define SLIMFIT_WIRE_TENSOR_CODEC_TEST_SUPPORT_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "proto/slimfit.pb.h"
#include "wire/tensor_codec.h"

namespace slimfit::performer::tensor_codec_testing {

inline constexpr int64_t kBlock = v1::LIMIT_INT8_BLOCK_ELEMENTS;
inline constexpr v1::Compression kEncodings[] = {v1::COMPRESSION_FLOAT16, v1::COMPRESSION_BFLOAT16,
                                                 v1::COMPRESSION_INT8};

// True when two float32 CPU tensors hold the same shape and the same bits.
bool SameBits(const at::Tensor& a, const at::Tensor& b);

// n float32 values, normally distributed then scaled by 10^u, u uniform in [lo, hi): every element
// has its own order of magnitude.
at::Tensor SpreadValues(int64_t n, double lo, double hi);
// n values whose int8 blocks have very different scales (block b is multiplied by 10^(b mod 17 − 8))
// and, within a block, magnitudes over four orders.
at::Tensor BlockSpreadValues(int64_t n);

// EncodeTensor / DecodeTensor that fail the calling test on an error (and return an empty value).
EncodedTensor Encode(const at::Tensor& x, v1::Compression compression);
at::Tensor Decode(const EncodedTensor& encoded);
at::Tensor RoundTrip(const at::Tensor& x, v1::Compression compression);

// The int8 bound with the float32 rounding of the codec's own arithmetic added. Exactly, the
// codec computes s = fl(m/127), q = rint(fl(x/s)), x̂ = fl(q·s) with unit roundoff u = 2⁻²⁴, so
//   |x − x̂| ≤ |x − q·s| + u·|q·s| ≤ s/2 + u·|x| + u·|q·s| ≤ m/254·(1 + u) + 2u·m·(1 + u) < m/254 + m·2⁻²².
// The slack is 127·2⁻²² ≈ 3·10⁻⁵ of a quantisation step, and needed: without it about one
// element in 10⁶ of BlockSpreadValues exceeds m/254 (by under 10⁻⁸·m).
double Int8Bound(double block_max);

}  // namespace slimfit::performer::tensor_codec_testing

#endif  // SLIMFIT_WIRE_TENSOR_CODEC_TEST_SUPPORT_H_
