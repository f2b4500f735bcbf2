#include "performer/prefix_attention.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "performer/matrix_products.h"
#include "performer/prefix_attention_blocks.h"
#include "performer/prefix_attention_cpu.h"

namespace slimfit::performer {
namespace {

// The defining sums, one row at a time.
PrefixAttentionResult Naive(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const Front& start) {
  at::Tensor r = start.numerator;
  at::Tensor z = start.denominator;
  std::vector<at::Tensor> num, den;
  for (int64_t l = 0; l < q.size(1); ++l) {
    r = r + k.select(1, l).unsqueeze(2) * v.select(1, l).unsqueeze(1);
    z = z + k.select(1, l);
    num.push_back(at::matmul(q.select(1, l).unsqueeze(1), r).squeeze(1));
    den.push_back((q.select(1, l) * z).sum(1));
  }
  return {at::stack(num, 1), at::stack(den, 1), Front{r, z}};
}

TEST(PrefixAttentionTest, BothModesMatchTheDefinitionAndEachOthersGradients) {
  at::manual_seed(3);
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const int64_t heads = 2, rows = 11, features = 3, dim = 4;
  at::Tensor q = at::rand({heads, rows, features}, options).requires_grad_();
  at::Tensor k = at::rand({heads, rows, features}, options).requires_grad_();
  at::Tensor v = at::randn({heads, rows, dim}, options).requires_grad_();
  at::Tensor r0 = at::rand({heads, features, dim}, options).requires_grad_();
  at::Tensor z0 = at::rand({heads, features}, options).requires_grad_();
  const std::vector<Segment> one = {Segment{0, rows, true}};
  const PrefixAttentionResult want = Naive(q, k, v, Front{r0, z0});
  const at::Tensor weights_num = at::randn({heads, rows, dim}, options);
  const at::Tensor weights_den = at::randn({heads, rows}, options);
  const at::Tensor weights_r = at::randn({heads, features, dim}, options);
  const at::Tensor weights_z = at::randn({heads, features}, options);
  auto objective = [&](const PrefixAttentionResult& p) {
    return (p.numerator * weights_num).sum() + (p.denominator * weights_den).sum() +
           (p.end.numerator * weights_r).sum() + (p.end.denominator * weights_z).sum();
  };
  const auto want_grads = torch::autograd::grad({objective(want)}, {q, k, v, r0, z0});
  for (auto [mode, block] : {std::pair{PrefixMode::kCumsum, int64_t{1}},
                             {PrefixMode::kChunked, int64_t{1}},
                             {PrefixMode::kChunked, int64_t{4}},
                             {PrefixMode::kChunked, int64_t{11}},
                             {PrefixMode::kChunked, int64_t{64}}}) {
    const PrefixAttentionResult got = CausalPrefixAttention(q, k, v, Front{r0, z0}, one, mode, block);
    EXPECT_TRUE(at::allclose(got.numerator, want.numerator, 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(got.denominator, want.denominator, 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(got.end.numerator, want.end.numerator, 1e-12, 1e-12));
    const auto grads = torch::autograd::grad({objective(got)}, {q, k, v, r0, z0});
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_TRUE(at::allclose(grads[i], want_grads[i], 1e-10, 1e-12)) << "input " << i << " block " << block;
    }
  }
}

TEST(PrefixAttentionTest, SegmentsRestartFromZero) {
  const auto options = at::TensorOptions().dtype(at::kDouble);
  at::Tensor q = at::rand({1, 6, 2}, options), k = at::rand({1, 6, 2}, options),
             v = at::rand({1, 6, 3}, options);
  const Front start{at::rand({1, 2, 3}, options), at::rand({1, 2}, options)};
  const std::vector<Segment> segments = {Segment{0, 2, true}, Segment{2, 6, false}};
  const PrefixAttentionResult got = CausalPrefixAttention(q, k, v, start, segments, PrefixMode::kChunked, 3);
  const Front zero{at::zeros({1, 2, 3}, options), at::zeros({1, 2}, options)};
  const PrefixAttentionResult tail = Naive(q.narrow(1, 2, 4), k.narrow(1, 2, 4), v.narrow(1, 2, 4), zero);
  EXPECT_TRUE(at::allclose(got.numerator.narrow(1, 2, 4), tail.numerator));
  EXPECT_TRUE(at::allclose(got.end.denominator, tail.end.denominator));
  const PrefixAttentionResult head = Naive(q.narrow(1, 0, 2), k.narrow(1, 0, 2), v.narrow(1, 0, 2), start);
  EXPECT_TRUE(at::allclose(got.denominator.narrow(1, 0, 2), head.denominator));
}

// The largest |got − want| over the largest |want|.
double RelativeError(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() /
         want.to(at::kDouble).abs().max().item<double>();
}

// The fused float32 kernels (prefix_attention_cpu.h) against the float64 definition, next to the
// LibTorch form in float32: outputs and every input gradient, one or several segments (views with
// a row stride), blocks that divide the rows and blocks that do not, a block larger than the rows.
TEST(PrefixAttentionTest, FusedFloatKernelsMatchTheDefinitionAsCloselyAsTheLibTorchForm) {
  if (!OneDnnProducts()) GTEST_SKIP() << "this build has no oneDNN: the fused kernels never run";
  at::manual_seed(5);
  const int64_t heads = 3, rows = 37, features = 8, dim = 5;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q64 = at::rand({heads, rows, features}, f64), k64 = at::rand({heads, rows, features}, f64);
  const at::Tensor v64 = at::randn({heads, rows, dim}, f64);
  const at::Tensor r64 = at::rand({heads, features, dim}, f64), z64 = at::rand({heads, features}, f64);
  const at::Tensor wn = at::randn({heads, rows, dim}, f64), wd = at::randn({heads, rows}, f64);
  const at::Tensor wr = at::randn({heads, features, dim}, f64), wz = at::randn({heads, features}, f64);
  for (const auto& segments :
       {std::vector<Segment>{Segment{0, rows, true}},
        std::vector<Segment>{Segment{0, 9, true}, Segment{9, 30, false}, Segment{30, rows, false}}}) {
    for (int64_t block : {1, 4, 16, 64}) {
      SCOPED_TRACE(::testing::Message() << segments.size() << " segments, block " << block);
      // Gradients of one weighted sum of all four outputs, for a dtype and a form; `interleaved`
      // stores φq, φk and v as [S, k, ·] permuted to [k, S, ·] (heads not S·M apart).
      auto run = [&](at::ScalarType dtype, bool fused, bool interleaved = false) {
        EnableFusedPrefixKernels(fused);
        std::vector<at::Tensor> in;
        for (const at::Tensor& t : {q64, k64, v64, r64, z64}) in.push_back(t.to(dtype).requires_grad_(true));
        if (interleaved) {
          for (int i = 0; i < 3; ++i) {
            in[i] = in[i].detach().permute({1, 0, 2}).contiguous().permute({1, 0, 2}).requires_grad_(true);
          }
        }
        const PrefixAttentionResult out = CausalPrefixAttention(in[0], in[1], in[2], Front{in[3], in[4]},
                                                                segments, PrefixMode::kChunked, block);
        const at::Tensor objective =
            (out.numerator * wn.to(dtype)).sum() + (out.denominator * wd.to(dtype)).sum() +
            (out.end.numerator * wr.to(dtype)).sum() + (out.end.denominator * wz.to(dtype)).sum();
        std::vector<at::Tensor> results = {out.numerator.detach(), out.denominator.detach(),
                                           out.end.numerator.detach(), out.end.denominator.detach()};
        for (const at::Tensor& g : torch::autograd::grad({objective}, in)) results.push_back(g);
        EnableFusedPrefixKernels(true);
        return results;
      };
      const std::vector<at::Tensor> want = run(at::kDouble, false);
      const std::vector<at::Tensor> fused = run(at::kFloat, true);
      const std::vector<at::Tensor> interleaved = run(at::kFloat, true, true);
      const std::vector<at::Tensor> libtorch = run(at::kFloat, false);
      for (size_t i = 0; i < want.size(); ++i) {
        const double libtorch_error = RelativeError(libtorch[i], want[i]);
        EXPECT_LT(RelativeError(fused[i], want[i]), std::max(1e-6, 4 * libtorch_error))
            << "result " << i << " (numerator, denominator, end front, then gradients of q, k, v, front)";
        EXPECT_LT(RelativeError(interleaved[i], want[i]), std::max(1e-6, 4 * libtorch_error))
            << "interleaved heads, result " << i;
      }
    }
  }
}

// U(n−1) = U(n) − Σ φk ⊗ v: the fused form (float32, interleaved heads too) and the LibTorch form
// give the front the slice started from, against float64.
TEST(PrefixAttentionTest, FrontWithoutRecoversTheFrontBeforeAStretch) {
  at::manual_seed(6);
  const int64_t heads = 3, rows = 21, features = 8, dim = 5;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::rand({heads, rows, features}, f64), k = at::rand({heads, rows, features}, f64);
  const at::Tensor v = at::randn({heads, rows, dim}, f64);
  const Front start{at::rand({heads, features, dim}, f64), at::rand({heads, features}, f64)};
  const Front after = Naive(q, k, v, start).end;
  for (bool fused : {true, false}) {
    for (bool interleaved : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "fused " << fused << ", interleaved " << interleaved);
      EnableFusedPrefixKernels(fused);
      at::Tensor k32 = k.to(at::kFloat), v32 = v.to(at::kFloat);
      if (interleaved) {
        k32 = k32.permute({1, 0, 2}).contiguous().permute({1, 0, 2});
        v32 = v32.permute({1, 0, 2}).contiguous().permute({1, 0, 2});
      }
      const Front before =
          FrontWithout(Front{after.numerator.to(at::kFloat), after.denominator.to(at::kFloat)}, k32, v32);
      EnableFusedPrefixKernels(true);
      EXPECT_LT(RelativeError(before.numerator, start.numerator), 1e-5);
      EXPECT_LT(RelativeError(before.denominator, start.denominator), 1e-5);
    }
  }
  const Front before64 = FrontWithout(after, k, v);
  EXPECT_LT(RelativeError(before64.numerator, start.numerator), 1e-12);
  EXPECT_LT(RelativeError(before64.denominator, start.denominator), 1e-12);
}

// The block-parallel form (prefix_attention_blocks.h, what CUDA runs) against the defining sums and
// against the block-by-block form's gradients (ChunkedPrefixBackward on the CPU in float64): one
// block, blocks that divide the rows and blocks that do not, a block larger than the rows, more
// blocks than one group holds (several groups carrying the front forwards and its gradient
// backwards; the last one padded, too), and inputs whose rows are not contiguous.
TEST(PrefixAttentionTest, BlockParallelFormMatchesTheDefinitionAndTheBlockByBlockGradients) {
  at::manual_seed(7);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const int64_t heads = 3, features = 4, dim = 5;
  for (auto [rows, block] : {std::pair<int64_t, int64_t>{37, 1},
                             {37, 4},
                             {37, 16},
                             {32, 16},
                             {37, 64},
                             {2 * kBlocksPerGroup + 9, 1},
                             {3 * kBlocksPerGroup * 2, 2},
                             {2 * kBlocksPerGroup * 4 + 5, 4}}) {
    for (bool interleaved : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << rows << " rows, block " << block << ", interleaved " << interleaved);
      at::Tensor q = at::rand({heads, rows, features}, f64), k = at::rand({heads, rows, features}, f64);
      at::Tensor v = at::randn({heads, rows, dim}, f64);
      if (interleaved) {
        q = q.permute({1, 0, 2}).contiguous().permute({1, 0, 2});
        k = k.permute({1, 0, 2}).contiguous().permute({1, 0, 2});
        v = v.permute({1, 0, 2}).contiguous().permute({1, 0, 2});
      }
      const Front start{at::rand({heads, features, dim}, f64), at::rand({heads, features}, f64)};
      const PrefixAttentionResult want = Naive(q, k, v, start);
      const BlockPrefixForward got =
          BlockParallelPrefixForward(q, k, v, start.numerator, start.denominator, block);
      EXPECT_LT(RelativeError(got.numerator, want.numerator), 1e-13);
      EXPECT_LT(RelativeError(got.denominator, want.denominator), 1e-13);
      EXPECT_LT(RelativeError(got.end_numerator, want.end.numerator), 1e-13);
      EXPECT_LT(RelativeError(got.end_denominator, want.end.denominator), 1e-13);

      const at::Tensor gn = at::randn({heads, rows, dim}, f64), gd = at::randn({heads, rows}, f64);
      const Front g_end{at::randn({heads, features, dim}, f64), at::randn({heads, features}, f64)};
      const PrefixGradients by_block = ChunkedPrefixBackward(q, k, v, start, block, gn, gd, g_end);
      const BlockPrefixGradients parallel = BlockParallelPrefixBackward(
          q, k, v, start.numerator, start.denominator, block, gn, gd, g_end.numerator, g_end.denominator);
      EXPECT_LT(RelativeError(parallel.q, by_block.phi_q), 1e-12);
      EXPECT_LT(RelativeError(parallel.k, by_block.phi_k), 1e-12);
      EXPECT_LT(RelativeError(parallel.v, by_block.v), 1e-12);
      EXPECT_LT(RelativeError(parallel.r0, by_block.start.numerator), 1e-12);
      EXPECT_LT(RelativeError(parallel.z0, by_block.start.denominator), 1e-12);
    }
  }
}

TEST(PrefixAttentionTest, BlockParallelFormRejectsShapesOutsideItsContract) {
  const at::Tensor q = at::rand({1, 4, 2}), v = at::rand({1, 4, 3});
  const at::Tensor r = at::zeros({1, 2, 3}), z = at::zeros({1, 2});
  EXPECT_THROW(BlockParallelPrefixForward(q, q, v, r, z, 0), c10::Error);
  EXPECT_THROW(BlockParallelPrefixForward(q, q, v, at::zeros({1, 3, 3}), z, 4), c10::Error);
  EXPECT_THROW(BlockParallelPrefixForward(q, q, v.narrow(1, 0, 3), r, z, 4), c10::Error);
  EXPECT_THROW(BlockParallelPrefixBackward(q, q, v, r, z, 4, v, at::zeros({1, 3}), r, z), c10::Error);
}

// With the fused kernels off, float32 goes through the LibTorch form: the switch the benchmark and
// the test above compare with is real.
TEST(PrefixAttentionTest, FusedKernelsApplyOnlyToFloatCpuTensorsWhileEnabled) {
  const at::Tensor q = at::rand({1, 4, 2}), v = at::rand({1, 4, 3});
  const at::Tensor r = at::zeros({1, 2, 3}), z = at::zeros({1, 2});
  EXPECT_EQ(FusedPrefixApplies(q, q, v, r, z), OneDnnProducts());
  EXPECT_FALSE(FusedPrefixApplies(q.to(at::kDouble), q.to(at::kDouble), v.to(at::kDouble), r.to(at::kDouble),
                                  z.to(at::kDouble)));
  EXPECT_FALSE(FusedPrefixApplies(q.transpose(1, 2).contiguous().transpose(1, 2), q, v, r, z));
  if (OneDnnProducts()) {  // a shape the contract does not allow is an error, not a stray access
    EXPECT_THROW(FusedPrefixForwardCpu(q, q, v, at::zeros({1, 3, 3}), z, 4), c10::Error);
    EXPECT_THROW(FusedPrefixForwardCpu(q, q, v, r, z, 0), c10::Error);
  }
  EnableFusedPrefixKernels(false);
  EXPECT_FALSE(FusedPrefixApplies(q, q, v, r, z));
  EnableFusedPrefixKernels(true);
}

}  // namespace
}  // namespace slimfit::performer
