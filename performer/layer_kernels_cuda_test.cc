// The CUDA row kernels (layer_kernels_cuda.h) against the LibTorch form explicit_backprop.cc runs
// where no row kernel applies: their bodies on the CPU through emulated threads (always), the
// kernels on a CUDA device (skipped where the build has none or no device is visible).
#include "performer/layer_kernels_cuda.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "performer/emulated_thread_block.h"
#include "performer/layer_kernels_cuda_kernels.h"
#include "performer/model_config.h"

namespace slimfit::performer {
namespace {

constexpr double kEps = 1e-6;  // as kDenominatorEps

struct Shape {
  int64_t rows, heads, head_dim;
  int64_t d() const { return heads * head_dim; }
};

const Shape kShapes[] = {{1, 1, 1}, {5, 2, 3}, {16, 4, 8}, {33, 3, 5}};

// The LibTorch forms (explicit_backprop.cc's fallbacks and FeaturesInto / FeatureGradientInto).
at::Tensor FeatureOf(FeatureMap map, const at::Tensor& x) {
  switch (map) {
    case FeatureMap::kRelu:
      return at::clamp_min(x, 0);
    case FeatureMap::kElu1:
      return at::elu(x).add_(1);
    case FeatureMap::kSqr:
      return x * x;
    case FeatureMap::kFavor:
      break;
  }
  return at::Tensor();
}

at::Tensor FeatureGradientOf(FeatureMap map, const at::Tensor& x, const at::Tensor& g) {
  switch (map) {
    case FeatureMap::kRelu:
      return at::threshold_backward(g, x, 0);
    case FeatureMap::kElu1:
      return at::elu_backward(g, 1, 1, 1, /*is_result=*/false, x);
    case FeatureMap::kSqr:
      return (x * g).mul_(2);
    case FeatureMap::kFavor:
      break;
  }
  return at::Tensor();
}

// [S, 3d] as [3, k, S, h].
at::Tensor HeadsOf(const at::Tensor& qkv, int64_t heads) {
  return qkv.view({qkv.size(0), 3, heads, qkv.size(1) / 3 / heads}).permute({1, 2, 0, 3});
}

at::Tensor HeadMajor(const at::Tensor& rows_by_d, int64_t heads) {
  return rows_by_d.view({rows_by_d.size(0), heads, rows_by_d.size(1) / heads}).transpose(0, 1);
}

// A grid-stride body on `threads` host threads (the emulation's barrier goes unused: no body syncs).
template <typename Body>
void Emulate(int64_t threads, const Body& body) {
  RunEmulatedThreadBlock(threads, [&](const EmulatedThreads& t) { body(t); });
}

double Discrepancy(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
  if (!g.isfinite().all().item<bool>()) return std::numeric_limits<double>::infinity();
  return (g - w).abs().max().item<double>() / std::max(1.0, w.abs().max().item<double>());
}

at::Tensor Nans(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::full(sizes, std::numeric_limits<double>::quiet_NaN(), options);
}

// What the four bodies compute on one shape and map, in dtype T, with `threads` threads, against the
// LibTorch forms in float64.
template <typename T>
void CheckBodies(FeatureMap map, const Shape& s, int64_t threads, double tolerance) {
  const std::string what = absl::StrCat(FeatureMapName(map), " ", s.rows, "x", s.heads, "x", s.head_dim, ", ",
                                        threads, " threads, ", sizeof(T) == 8 ? "float64" : "float32");
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const auto opt = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  at::manual_seed(s.rows * 7 + s.heads);
  const at::Tensor qkv = at::randn({s.rows, 3 * s.d()}, f64);
  const at::Tensor heads = HeadsOf(qkv, s.heads);

  // Split.
  at::Tensor phi = Nans({2, s.heads, s.rows, s.head_dim}, opt), v = Nans({s.heads, s.rows, s.head_dim}, opt);
  const at::Tensor qkv_t = qkv.to(opt.dtype());
  const auto split = internal::SplitHeadsArgsOf<T>(map, qkv_t, s.heads, phi, v);
  Emulate(threads, [&](const EmulatedThreads& t) { cuda_kernels::SplitHeadsBody(t, split); });
  EXPECT_LE(Discrepancy(phi, FeatureOf(map, heads.narrow(0, 0, 2))), tolerance) << what << ": φ";
  EXPECT_LE(Discrepancy(v, heads.select(0, 2)), tolerance) << what << ": v";

  // Join.
  const at::Tensor gq = at::randn({s.heads, s.rows, s.head_dim}, f64), gk = at::randn_like(gq),
                   gv = at::randn_like(gq);
  at::Tensor g_qkv = Nans({s.rows, 3 * s.d()}, opt);
  const at::Tensor gq_t = gq.to(opt.dtype()), gk_t = gk.to(opt.dtype()), gv_t = gv.to(opt.dtype());
  const auto join = internal::JoinHeadGradientsArgsOf<T>(map, qkv_t, gq_t, gk_t, gv_t, g_qkv);
  Emulate(threads, [&](const EmulatedThreads& t) { cuda_kernels::JoinHeadGradientsBody(t, join); });
  at::Tensor want_g = at::empty({s.rows, 3 * s.d()}, f64);
  const at::Tensor want_heads = HeadsOf(want_g, s.heads);
  want_heads.select(0, 0).copy_(FeatureGradientOf(map, heads.select(0, 0), gq));
  want_heads.select(0, 1).copy_(FeatureGradientOf(map, heads.select(0, 1), gk));
  want_heads.select(0, 2).copy_(gv);
  EXPECT_LE(Discrepancy(g_qkv, want_g), tolerance) << what << ": g_qkv";

  // Normalisation, forward: denominators positive as prefix sums of positive features make them.
  const at::Tensor num = at::randn({s.heads, s.rows, s.head_dim}, f64);
  const at::Tensor den = at::rand({s.heads, s.rows}, f64).add_(0.5);
  at::Tensor den_eps = Nans({s.heads, s.rows}, opt), attention = Nans({s.rows, s.d()}, opt);
  const at::Tensor num_t = num.to(opt.dtype()), den_t = den.to(opt.dtype());
  const auto normalize = internal::NormalizeAttentionArgsOf<T>(num_t, den_t, kEps, den_eps, attention);
  Emulate(threads, [&](const EmulatedThreads& t) { cuda_kernels::NormalizeAttentionBody(t, normalize); });
  const at::Tensor want_den_eps = den.add(kEps);
  at::Tensor want_attention = at::empty({s.rows, s.d()}, f64);
  at::Tensor want_attention_heads = HeadMajor(want_attention, s.heads);
  at::div_out(want_attention_heads, num, want_den_eps.unsqueeze(2));
  EXPECT_LE(Discrepancy(den_eps, want_den_eps), tolerance) << what << ": den + ε";
  EXPECT_LE(Discrepancy(attention, want_attention), tolerance) << what << ": attention";

  // Normalisation, backward.
  const at::Tensor g_attention = at::randn({s.rows, s.d()}, f64);
  at::Tensor g_num = Nans({s.heads, s.rows, s.head_dim}, opt), g_den = Nans({s.heads, s.rows}, opt);
  const at::Tensor g_attention_t = g_attention.to(opt.dtype()), attention_t = want_attention.to(opt.dtype());
  const at::Tensor den_eps_t = want_den_eps.to(opt.dtype());
  const auto backward =
      internal::NormalizeAttentionBackwardArgsOf<T>(g_attention_t, attention_t, den_eps_t, g_num, g_den);
  Emulate(threads,
          [&](const EmulatedThreads& t) { cuda_kernels::NormalizeAttentionBackwardBody(t, backward); });
  at::Tensor want_g_num = at::empty({s.heads, s.rows, s.head_dim}, f64);
  at::div_out(want_g_num, HeadMajor(g_attention, s.heads), want_den_eps.unsqueeze(2));
  const at::Tensor want_g_den = at::mul(want_g_num, HeadMajor(want_attention, s.heads)).sum(2).neg_();
  EXPECT_LE(Discrepancy(g_num, want_g_num), tolerance) << what << ": g_num";
  EXPECT_LE(Discrepancy(g_den, want_g_den), tolerance) << what << ": g_den";
}

TEST(LayerKernelsCudaTest, BodiesOnEmulatedThreadsGiveTheLibTorchForm) {
  for (FeatureMap map : {FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr}) {
    for (const Shape& s : kShapes) {
      for (int64_t threads : {int64_t{1}, int64_t{5}, int64_t{64}}) {
        CheckBodies<double>(map, s, threads, 1e-14);
        CheckBodies<float>(map, s, threads, 1e-6);
      }
    }
  }
}

// Column sums and LayerNorm's backward, whose sinks already hold something, against LibTorch's
// sum and native_layer_norm_backward.
template <typename T>
void CheckReductions(int64_t rows, int64_t n, int64_t threads, double tolerance) {
  const std::string what =
      absl::StrCat(rows, "x", n, ", ", threads, " threads, ", sizeof(T) == 8 ? "float64" : "float32");
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::ScalarType dtype = c10::CppTypeToScalarType<T>::value;
  at::manual_seed(rows + n);
  const at::Tensor g = at::randn({rows, n}, f64), x = at::randn({rows, n}, f64).mul_(3).add_(1);
  const at::Tensor weight = at::randn({n}, f64), bias = at::randn({n}, f64);
  const at::Tensor held_w = at::randn({n}, f64), held_b = at::randn({n}, f64);

  at::Tensor sink = held_b.to(dtype).clone();  // a copy in float64 too: the sinks are written
  const at::Tensor g_t = g.to(dtype);
  const auto sums = internal::AddColumnSumsArgsOf<T>(sink, g_t);
  Emulate(threads, [&](const EmulatedThreads& t) { cuda_kernels::AddColumnSumsBody(t, sums); });
  EXPECT_LE(Discrepancy(sink, held_b + g.sum(0)), tolerance) << what << ": column sums";

  const auto [y, mean, rstd] = at::native_layer_norm(x, {n}, weight, bias, 1e-5);
  const auto [want_gx, want_gw, want_gb] =
      at::native_layer_norm_backward(g, x, {n}, mean, rstd, weight, bias, {true, true, true});
  const at::Tensor x_t = x.to(dtype), mean_t = mean.to(dtype), rstd_t = rstd.to(dtype),
                   weight_t = weight.to(dtype);
  at::Tensor g_x = Nans({rows, n}, at::TensorOptions().dtype(dtype));
  at::Tensor sink_w = held_w.to(dtype).clone(), sink_b = held_b.to(dtype).clone();
  const auto backward =
      internal::LayerNormBackwardArgsOf<T>(g_t, x_t, mean_t, rstd_t, weight_t, g_x, sink_w, sink_b);
  Emulate(threads, [&](const EmulatedThreads& t) { cuda_kernels::LayerNormBackwardBody(t, backward); });
  EXPECT_LE(Discrepancy(g_x, want_gx), tolerance) << what << ": g_x";
  EXPECT_LE(Discrepancy(sink_w, held_w + want_gw), tolerance) << what << ": weight";
  EXPECT_LE(Discrepancy(sink_b, held_b + want_gb), tolerance) << what << ": bias";
}

// The embedding against performer_model.h's EmbedTokens (an embedding lookup beside sin and cos of
// position × frequency), and post-LN's LayerNorm with its residual against native_layer_norm + x.
template <typename T>
void CheckEmbeddingAndLayerNormAdd(int64_t rows, int64_t d, int64_t threads, double tolerance) {
  const std::string what =
      absl::StrCat(rows, "x", d, ", ", threads, " threads, ", sizeof(T) == 8 ? "float64" : "float32");
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::ScalarType dtype = c10::CppTypeToScalarType<T>::value;
  at::manual_seed(rows * 3 + d);
  const int64_t vocab = 11;
  const at::Tensor tokens = at::randint(vocab, {rows}, at::kLong),
                   positions = at::randint(5000, {rows}, at::kLong);
  const at::Tensor table = at::randn({vocab, d / 2}, f64), frequencies = at::rand({d / 4}, f64);
  const at::Tensor table_t = table.to(dtype), frequencies_t = frequencies.to(dtype);
  at::Tensor x0 = Nans({rows, d}, at::TensorOptions().dtype(dtype));
  const auto embed = internal::EmbedArgsOf<T>(tokens, positions, table_t, frequencies_t, x0);
  Emulate(threads, [&](const EmulatedThreads& t) { cuda_kernels::EmbedBody(t, embed); });
  const at::Tensor angles = positions.to(dtype).unsqueeze(1) * frequencies_t.unsqueeze(0);
  const at::Tensor want = at::cat({at::embedding(table_t, tokens), at::sin(angles), at::cos(angles)}, 1);
  EXPECT_LE(Discrepancy(x0, want), tolerance) << what << ": embedding";

  const at::Tensor x = at::randn({rows, d}, f64).mul_(2).add_(0.5), residual = at::randn({rows, d}, f64);
  const at::Tensor weight = at::randn({d}, f64), bias = at::randn({d}, f64);
  const auto [normalized, want_mean, want_rstd] = at::native_layer_norm(x, {d}, weight, bias, 1e-5);
  const at::Tensor x_t = x.to(dtype), weight_t = weight.to(dtype), bias_t = bias.to(dtype),
                   res_t = residual.to(dtype);
  const auto options = at::TensorOptions().dtype(dtype);
  at::Tensor y = Nans({rows, d}, options), mean = Nans({rows, 1}, options), rstd = Nans({rows, 1}, options);
  const auto add = internal::LayerNormAddArgsOf<T>(x_t, weight_t, bias_t, 1e-5, res_t, y, mean, rstd);
  Emulate(threads, [&](const EmulatedThreads& t) { cuda_kernels::LayerNormAddBody(t, add); });
  EXPECT_LE(Discrepancy(y, normalized + residual), tolerance) << what << ": y";
  EXPECT_LE(Discrepancy(mean, want_mean), tolerance) << what << ": mean";
  EXPECT_LE(Discrepancy(rstd, want_rstd), tolerance) << what << ": rstd";
}

TEST(LayerKernelsCudaTest, EmbeddingAndLayerNormBodiesOnEmulatedThreadsGiveTheLibTorchForm) {
  for (auto [rows, d] : {std::pair<int64_t, int64_t>{1, 4}, {5, 8}, {16, 64}, {33, 20}}) {
    for (int64_t threads : {int64_t{1}, int64_t{5}, int64_t{64}}) {
      CheckEmbeddingAndLayerNormAdd<double>(rows, d, threads, 1e-12);
      CheckEmbeddingAndLayerNormAdd<float>(rows, d, threads, 2e-5);
    }
  }
  // A token outside the table is a row of NaN, never a read outside it.
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor tokens = at::tensor({int64_t{1}, int64_t{7}, int64_t{-1}}),
                   positions = at::zeros({3}, at::kLong);
  const at::Tensor table = at::ones({7, 2}, f64), frequencies = at::ones({1}, f64);
  at::Tensor x0 = at::zeros({3, 4}, f64);
  const auto embed = internal::EmbedArgsOf<double>(tokens, positions, table, frequencies, x0);
  Emulate(2, [&](const EmulatedThreads& t) { cuda_kernels::EmbedBody(t, embed); });
  EXPECT_TRUE(x0[0].isfinite().all().item<bool>());
  EXPECT_TRUE(x0[1].narrow(0, 0, 2).isnan().all().item<bool>());
  EXPECT_TRUE(x0[2].narrow(0, 0, 2).isnan().all().item<bool>());
}

TEST(LayerKernelsCudaTest, ReductionBodiesOnEmulatedThreadsGiveTheLibTorchForm) {
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {16, 64}, {37, 24}}) {
    for (int64_t threads : {int64_t{1}, int64_t{5}, int64_t{64}}) {
      CheckReductions<double>(rows, n, threads, 1e-13);
      CheckReductions<float>(rows, n, threads, 1e-5);
    }
  }
}

TEST(LayerKernelsCudaTest, ShapesOutsideTheContractAreErrors) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor qkv = at::zeros({4, 24}, f64);
  at::Tensor phi = at::empty({2, 2, 4, 4}, f64), v = at::empty({2, 4, 4}, f64);
  EXPECT_NO_THROW(internal::SplitHeadsArgsOf<double>(FeatureMap::kSqr, qkv, 2, phi, v));
  EXPECT_THROW(internal::SplitHeadsArgsOf<double>(FeatureMap::kSqr, qkv, 3, phi, v), c10::Error) << "heads";
  EXPECT_THROW(internal::SplitHeadsArgsOf<double>(FeatureMap::kFavor, qkv, 2, phi, v), c10::Error)
      << "FAVOR+";
  EXPECT_THROW(internal::SplitHeadsArgsOf<float>(FeatureMap::kSqr, qkv, 2, phi, v), c10::Error) << "dtype";
  at::Tensor wide = at::empty({2, 2, 4, 8}, f64).narrow(3, 0, 4);
  EXPECT_THROW(internal::SplitHeadsArgsOf<double>(FeatureMap::kSqr, qkv, 2, wide, v), c10::Error)
      << "not dense";
  at::Tensor sink = at::zeros({23}, f64);
  EXPECT_THROW(internal::AddColumnSumsArgsOf<double>(sink, qkv), c10::Error) << "sink width";
  at::Tensor g_x = at::empty_like(qkv), w = at::ones({24}, f64), mean = at::zeros({4, 1}, f64);
  EXPECT_THROW(internal::LayerNormBackwardArgsOf<double>(qkv, qkv, mean, mean.narrow(0, 0, 3).contiguous(), w,
                                                         g_x, w, sink),
               c10::Error)
      << "rstd rows";
  // Off the device, or disabled, nothing applies.
  EnableFusedCudaKernels(true);
  EXPECT_FALSE(LayerKernelsCudaApply({&qkv, &phi, &v}));
  EnableFusedCudaKernels(false);
}

TEST(LayerKernelsCudaTest, KernelsOnTheDeviceGiveTheLibTorchForm) {
  if (!FusedCudaKernelsBuilt())
    GTEST_SKIP() << "this build has no fused CUDA kernels (SLIMFIT_WITH_CUDA_KERNELS)";
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: nothing to run the kernels on";
  const auto cuda = at::TensorOptions().device(at::kCUDA, 0);
  EnableFusedCudaKernels(true);
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const double tolerance = dtype == at::kDouble ? 1e-14 : 1e-6;
    for (FeatureMap map : {FeatureMap::kRelu, FeatureMap::kElu1, FeatureMap::kSqr}) {
      for (const Shape& s : kShapes) {
        const std::string what =
            absl::StrCat(FeatureMapName(map), " ", s.rows, "x", s.heads, "x", s.head_dim);
        const auto opt = cuda.dtype(dtype);
        const at::Tensor qkv = at::randn({s.rows, 3 * s.d()}, opt.dtype(at::kDouble));
        const at::Tensor heads = HeadsOf(qkv, s.heads);
        at::Tensor phi = at::empty({2, s.heads, s.rows, s.head_dim}, opt),
                   v = at::empty({s.heads, s.rows, s.head_dim}, opt);
        const at::Tensor qkv_t = qkv.to(dtype);
        ASSERT_TRUE(LayerKernelsCudaApply({&qkv_t, &phi, &v})) << what;
        SplitHeadsCuda(map, qkv_t, s.heads, phi, v);
        EXPECT_LE(Discrepancy(phi, FeatureOf(map, heads.narrow(0, 0, 2))), tolerance) << what;
        EXPECT_LE(Discrepancy(v, heads.select(0, 2)), tolerance) << what;
        const at::Tensor gq = at::randn({s.heads, s.rows, s.head_dim}, opt), gk = at::randn_like(gq),
                         gv = at::randn_like(gq);
        at::Tensor g_qkv = at::empty({s.rows, 3 * s.d()}, opt);
        JoinHeadGradientsCuda(map, qkv_t, gq, gk, gv, g_qkv);
        const at::Tensor g_heads = HeadsOf(g_qkv, s.heads);
        EXPECT_LE(
            Discrepancy(g_heads.select(0, 0), FeatureGradientOf(map, heads.select(0, 0), gq.to(at::kDouble))),
            tolerance)
            << what << ": q";
        EXPECT_LE(
            Discrepancy(g_heads.select(0, 1), FeatureGradientOf(map, heads.select(0, 1), gk.to(at::kDouble))),
            tolerance)
            << what << ": k";
        EXPECT_LE(Discrepancy(g_heads.select(0, 2), gv), tolerance) << what << ": v";
        const at::Tensor num = at::randn({s.heads, s.rows, s.head_dim}, opt),
                         den = at::rand({s.heads, s.rows}, opt).add_(0.5);
        at::Tensor den_eps = at::empty_like(den), attention = at::empty({s.rows, s.d()}, opt);
        NormalizeAttentionCuda(num, den, kEps, den_eps, attention);
        EXPECT_LE(Discrepancy(HeadMajor(attention, s.heads), num / den.add(kEps).unsqueeze(2)), tolerance)
            << what;
        at::Tensor g_num = at::empty_like(num), g_den = at::empty_like(den);
        NormalizeAttentionBackwardCuda(attention, attention, den_eps, g_num, g_den);
        const at::Tensor want_g_num = HeadMajor(attention, s.heads) / den_eps.unsqueeze(2);
        EXPECT_LE(Discrepancy(g_num, want_g_num), tolerance) << what;
        EXPECT_LE(Discrepancy(g_den, (want_g_num * HeadMajor(attention, s.heads)).sum(2).neg()), tolerance)
            << what;
        {
          const at::Tensor tokens = at::randint(9, {s.rows}, cuda.dtype(at::kLong));
          const at::Tensor positions = at::randint(100, {s.rows}, cuda.dtype(at::kLong));
          const int64_t width = 4 * s.d();
          const at::Tensor table = at::randn({9, width / 2}, opt), frequencies = at::rand({width / 4}, opt);
          at::Tensor x0 = at::empty({s.rows, width}, opt);
          EmbedCuda(tokens, positions, table, frequencies, x0);
          const at::Tensor angles = positions.to(dtype).unsqueeze(1) * frequencies.unsqueeze(0);
          EXPECT_LE(
              Discrepancy(x0, at::cat({at::embedding(table, tokens), at::sin(angles), at::cos(angles)}, 1)),
              dtype == at::kDouble ? 1e-12 : 1e-5)
              << what << ": embedding";
        }
        {
          const at::Tensor w = at::randn({s.d()}, opt), b = at::randn({s.d()}, opt);
          const auto [normalized, want_mean, want_rstd] =
              at::native_layer_norm(attention, {s.d()}, w, b, 1e-5);
          at::Tensor y = at::empty_like(attention), mean = at::empty({s.rows, 1}, opt),
                     rstd = at::empty_like(mean);
          LayerNormAddCuda(attention, w, b, 1e-5, num.view({s.rows, s.d()}), y, mean, rstd);
          EXPECT_LE(Discrepancy(y, normalized + num.view({s.rows, s.d()})),
                    dtype == at::kDouble ? 1e-12 : 1e-5)
              << what << ": LayerNorm and residual";
          EXPECT_LE(Discrepancy(rstd, want_rstd), dtype == at::kDouble ? 1e-12 : 1e-5) << what;
        }
        at::Tensor sink = at::zeros({s.d()}, opt);
        AddColumnSumsCuda(sink, attention);
        EXPECT_LE(Discrepancy(sink, attention.sum(0)), tolerance) << what;
        const at::Tensor w = at::randn({s.d()}, opt), b = at::zeros({s.d()}, opt);
        const auto [y, mean, rstd] = at::native_layer_norm(attention, {s.d()}, w, b, 1e-5);
        const auto [want_gx, want_gw, want_gb] = at::native_layer_norm_backward(
            attention, attention, {s.d()}, mean, rstd, w, b, {true, true, true});
        at::Tensor g_x = at::empty_like(attention), sink_w = at::zeros_like(w), sink_b = at::zeros_like(w);
        LayerNormBackwardCuda(attention, attention, mean, rstd, w, g_x, sink_w, sink_b);
        const double ln_tolerance = dtype == at::kDouble ? 1e-12 : 1e-5;
        EXPECT_LE(Discrepancy(g_x, want_gx), ln_tolerance) << what;
        EXPECT_LE(Discrepancy(sink_w, want_gw), ln_tolerance) << what;
        EXPECT_LE(Discrepancy(sink_b, want_gb), ln_tolerance) << what;
      }
    }
  }
  EnableFusedCudaKernels(false);
}

}  // namespace
}  // namespace slimfit::performer
