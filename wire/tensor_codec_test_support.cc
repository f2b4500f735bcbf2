#include "wire/tensor_codec_test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/statusor.h"

namespace slimfit::performer::tensor_codec_testing {

bool SameBits(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  at::Tensor x = a.contiguous();
  at::Tensor y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel() * x.element_size())) == 0;
}

at::Tensor SpreadValues(int64_t n, double lo, double hi) {
  at::Tensor sign_and_shape = at::randn({n}, at::kDouble);
  at::Tensor magnitude = at::pow(10.0, at::rand({n}, at::kDouble) * (hi - lo) + lo);
  return (sign_and_shape * magnitude).to(at::kFloat);
}

at::Tensor BlockSpreadValues(int64_t n) {
  at::Tensor x = SpreadValues(n, -2, 2).to(at::kDouble);
  at::Tensor exponent = at::remainder(at::div(at::arange(n, at::kLong), kBlock, "floor"), 17) - 8;
  at::Tensor block_scale = at::pow(10.0, exponent.to(at::kDouble));
  return (x * block_scale).to(at::kFloat);
}

EncodedTensor Encode(const at::Tensor& x, v1::Compression compression) {
  absl::StatusOr<EncodedTensor> encoded = EncodeTensor(x, compression);
  EXPECT_TRUE(encoded.ok()) << encoded.status();
  return encoded.ok() ? *std::move(encoded) : EncodedTensor{};
}

at::Tensor Decode(const EncodedTensor& encoded) {
  absl::StatusOr<at::Tensor> decoded = DecodeTensor(encoded);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  return decoded.ok() ? *decoded : at::Tensor();
}

at::Tensor RoundTrip(const at::Tensor& x, v1::Compression compression) {
  return Decode(Encode(x, compression));
}

double Int8Bound(double block_max) { return block_max / 254.0 + block_max * std::ldexp(1.0, -22); }

}  // namespace slimfit::performer::tensor_codec_testing
