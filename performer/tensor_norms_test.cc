#include "performer/tensor_norms.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace slimfit::performer {
namespace {

// Several parallel blocks and a ragged end, contiguous float32 and float64, a strided view (through
// LibTorch), against LibTorch's float64 reductions.
TEST(TensorNormsTest, MatchLibTorchInFloat64) {
  at::manual_seed(11);
  const int64_t n = 300001;
  const at::Tensor f = at::randn({n}) * 3;
  const at::Tensor d = at::randn({n}, at::kDouble);
  const at::Tensor strided = at::randn({2 * n}).slice(0, 0, 2 * n, 2);
  for (const at::Tensor& x : {f, d, strided}) {
    const at::Tensor wide = x.to(at::kDouble);
    EXPECT_NEAR(SquaredNorm(x), wide.pow(2).sum().item<double>(), 1e-9 * wide.pow(2).sum().item<double>());
    EXPECT_EQ(MaxMagnitude(x), wide.abs().max().item<double>());
  }
  EXPECT_EQ(MaxMagnitude(at::zeros({0})), 0.0);
  EXPECT_EQ(SquaredNorm(at::zeros({0})), 0.0);
}

TEST(TensorNormsTest, NonFiniteElementsShowAnywhere) {
  for (const int64_t where : {int64_t{0}, int64_t{70000}, int64_t{199999}}) {
    at::Tensor x = at::ones({200000});
    x[where] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(MaxMagnitude(x))) << where;
    EXPECT_TRUE(std::isnan(SquaredNorm(x))) << where;
    x[where] = -std::numeric_limits<float>::infinity();
    EXPECT_TRUE(std::isinf(MaxMagnitude(x))) << where;
    EXPECT_TRUE(std::isinf(SquaredNorm(x))) << where;
  }
}

}  // namespace
}  // namespace slimfit::performer
