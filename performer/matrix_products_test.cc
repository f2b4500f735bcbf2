#include "performer/matrix_products.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <vector>

#include "gtest/gtest.h"

namespace slimfit::performer {
namespace {

// The largest |got − want| relative to the largest |want|.
double RelativeError(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() /
         want.to(at::kDouble).abs().max().item<double>();
}

// Every layout an operand can arrive in: contiguous, a transposed view, a column slice of a wider
// matrix (leading dimension > columns), and a transposed slice.
std::vector<at::Tensor> Layouts(int64_t rows, int64_t cols, at::ScalarType dtype) {
  return {at::randn({rows, cols}, dtype), at::randn({cols, rows}, dtype).t(),
          at::randn({rows, cols + 5}, dtype).narrow(1, 2, cols),
          at::randn({cols + 3, rows}, dtype).narrow(0, 1, cols).t()};
}

class MatrixProductsTest : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(MatrixProductsTest, EqualsLibTorchForEveryOperandLayoutAndShape) {
  at::manual_seed(7);
  const at::ScalarType dtype = GetParam();
  const double tolerance = dtype == at::kFloat ? 1e-5 : 1e-12;
  for (auto [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {16, 256, 768},
           {1, 7, 5},
           {5, 1, 9},
           {9, 4, 1},
           {1, 1, 1},
           {33, 65, 17},
           {127, 9, 13},
           {130, 17, 9}}) {  // either side of the few-rows path for transposed right operands
    SCOPED_TRACE(::testing::Message() << "m " << m << " k " << k << " n " << n);
    const at::Tensor bias = at::randn({n}, dtype);
    for (const at::Tensor& a : Layouts(m, k, dtype)) {
      for (const at::Tensor& b : Layouts(k, n, dtype)) {
        EXPECT_LT(RelativeError(AddBiasProduct(bias, a, b), at::addmm(bias, a, b)), tolerance);
        EXPECT_LT(RelativeError(Product(a, b), at::mm(a, b)), tolerance);
        for (at::Tensor out : Layouts(m, n, dtype)) {
          const at::Tensor want = out.addmm(a, b);
          AccumulateProduct(out, a, b);
          EXPECT_LT(RelativeError(out, want), tolerance);
        }
      }
    }
  }
}

TEST_P(MatrixProductsTest, AccumulatesIntoAViewWithoutTouchingTheRestOfItsStorage) {
  const at::ScalarType dtype = GetParam();
  at::Tensor fused = at::zeros({8, 12}, dtype);
  at::Tensor middle = fused.narrow(1, 4, 4);  // like the q/k/v gradient views of one fused buffer
  const at::Tensor a = at::randn({8, 3}, dtype);
  const at::Tensor b = at::randn({3, 4}, dtype);
  AccumulateProduct(middle, a, b);
  AccumulateProduct(middle, a, b);
  EXPECT_LT(RelativeError(middle, 2 * at::mm(a, b)), dtype == at::kFloat ? 1e-6 : 1e-14);
  EXPECT_EQ(fused.narrow(1, 0, 4).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(fused.narrow(1, 8, 4).abs().sum().item<double>(), 0.0);
}

TEST_P(MatrixProductsTest, RecordsGradientsThroughLibTorchWhenAnOperandRequiresThem) {
  const at::ScalarType dtype = GetParam();
  const at::Tensor a = at::randn({4, 3}, dtype).requires_grad_(true);
  const at::Tensor b = at::randn({3, 2}, dtype);
  const at::Tensor bias = at::randn({2}, dtype);
  AddBiasProduct(bias, a, b).sum().backward();
  ASSERT_TRUE(a.grad().defined());
  EXPECT_LT(RelativeError(a.grad(), b.sum(1).unsqueeze(0).expand({4, 3})), 1e-6);
}

TEST_P(MatrixProductsTest, EmptyInnerDimensionGivesTheBias) {
  const at::ScalarType dtype = GetParam();
  const at::Tensor bias = at::randn({3}, dtype);
  const at::Tensor got = AddBiasProduct(bias, at::empty({2, 0}, dtype), at::empty({0, 3}, dtype));
  EXPECT_TRUE(at::equal(got, bias.expand({2, 3})));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatrixProductsTest, ::testing::Values(at::kFloat, at::kDouble),
                         [](const auto& info) { return info.param == at::kFloat ? "float32" : "float64"; });

// The Bazel build links oneDNN (its test target defines SLIMFIT_EXPECT_ONEDNN): a build that lost it
// would run every float32 product on the slow path without another symptom.
#ifdef SLIMFIT_EXPECT_ONEDNN
TEST(MatrixProducts, ThisBuildUsesOneDnn) { EXPECT_TRUE(OneDnnProducts()); }
#endif

// Mixed precision: operands rounded to bfloat16, the product rounded to bfloat16 and returned in
// float32; accumulation into a float32 buffer; Undefined or the operands' own dtype is the plain
// product.
TEST(MatrixProducts, ReducedPrecisionProductsRoundTheOperandsAndTheProduct) {
  at::manual_seed(9);
  const at::Tensor a = at::randn({7, 33}), b = at::randn({33, 5}), bias = at::randn({5});
  const at::Tensor got = AddBiasProductIn(at::kBFloat16, bias, a, b);
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  const at::Tensor want =
      at::addmm(bias.to(at::kBFloat16), a.to(at::kBFloat16), b.to(at::kBFloat16)).to(at::kFloat);
  EXPECT_TRUE(at::equal(got, want));
  const at::Tensor exact = at::addmm(bias, a, b);
  EXPECT_GT((got - exact).abs().max().item<double>(), 1e-4);  // bfloat16 really ran
  EXPECT_TRUE(at::allclose(got, exact, 3e-2, 3e-2));
  EXPECT_TRUE(at::allclose(AddBiasProductIn(at::ScalarType::Undefined, bias, a, b), exact, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(AddBiasProductIn(at::kFloat, at::Tensor(), a, b), at::mm(a, b), 1e-5, 1e-5));

  at::Tensor out = at::ones({7, 5});
  AccumulateProductIn(at::kBFloat16, out, a, b);
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(out, 1 + at::mm(a.to(at::kBFloat16), b.to(at::kBFloat16)).to(at::kFloat)));
}

}  // namespace
}  // namespace slimfit::performer
