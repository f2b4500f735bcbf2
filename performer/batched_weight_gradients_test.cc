#include "performer/batched_weight_gradients.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

namespace slimfit::performer {
namespace {

// Slices of `rows` rows each, as a sliced backward adds them: x [r, m], g [r, n].
struct Slices {
  std::vector<at::Tensor> x, g;
};

Slices Make(const std::vector<int64_t>& rows, int64_t m, int64_t n, at::ScalarType dtype) {
  Slices s;
  for (int64_t r : rows) {
    s.x.push_back(at::randn({r, m}, at::TensorOptions().dtype(dtype)));
    s.g.push_back(at::randn({r, n}, at::TensorOptions().dtype(dtype)));
  }
  return s;
}

at::Tensor Direct(const Slices& s, const at::Tensor& start) {
  at::Tensor want = start.clone();
  for (size_t i = 0; i < s.x.size(); ++i) want.addmm_(s.x[i].t(), s.g[i]);
  return want;
}

TEST(BatchedWeightGradientsTest, TheSameSumAsSliceBySliceOnceFlushed) {
  at::manual_seed(3);
  // Slices that fill a batch exactly, overflow it, split across two batches with a short last one,
  // and one past the batch size.
  const std::vector<std::vector<int64_t>> cases = {
      {16, 16, 16, 16}, {16, 16, 16, 16, 16}, {24, 24, 24, 7}, {48, 48, 48}, {16, 100, 16}};
  for (const std::vector<int64_t>& rows : cases) {
    const Slices s = Make(rows, 48, 80, at::kDouble);
    const at::Tensor start = at::randn({48, 80}, at::kDouble);
    at::Tensor gradient = start.clone();
    BatchedWeightGradients batched(64);
    for (size_t i = 0; i < rows.size(); ++i) batched.Add(gradient, s.x[i], s.g[i]);
    batched.Flush();
    EXPECT_TRUE(at::allclose(gradient, Direct(s, start), 1e-12, 1e-12))
        << "slices of " << testing::PrintToString(rows);
    batched.Flush();  // nothing left: flushing again changes nothing
    EXPECT_TRUE(at::allclose(gradient, Direct(s, start), 1e-12, 1e-12));
  }
}

TEST(BatchedWeightGradientsTest, KeptRowsAreCopiesAndGradientsAreKeptApart) {
  at::manual_seed(4);
  const Slices a = Make({16, 16, 16}, 32, 24, at::kFloat);
  const Slices b = Make({16, 16, 16}, 24, 40, at::kFloat);
  at::Tensor ga = at::zeros({32, 24});
  at::Tensor gb = at::zeros({24, 40});
  BatchedWeightGradients batched(64);
  for (size_t i = 0; i < 3; ++i) {
    // The caller reuses its buffers after each Add (the backward frees its tape as it goes).
    at::Tensor x = a.x[i].clone(), g = a.g[i].clone();
    batched.Add(ga, x, g);
    x.fill_(1e6);
    g.fill_(1e6);
    batched.Add(gb, b.x[i], b.g[i]);
  }
  EXPECT_EQ(ga.abs().sum().item<float>(), 0.0f) << "nothing added before the batch is full or flushed";
  batched.Flush();
  EXPECT_TRUE(at::allclose(ga, Direct(a, at::zeros({32, 24})), 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(gb, Direct(b, at::zeros({24, 40})), 1e-5, 1e-5));
  // One buffer of 64 rows of x and g per gradient, as the cost model counts them.
  EXPECT_EQ(batched.allocated_bytes(), 64 * (32 + 24 + 24 + 40) * 4);
}

}  // namespace
}  // namespace slimfit::performer
