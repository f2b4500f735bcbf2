#include "performer/layer_kernels_cuda.h"

#include <c10/util/Exception.h>

#include "performer/emulated_thread_block.h"

#if defined(SLIMFIT_WITH_CUDA_KERNELS)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace slimfit::performer {
namespace {

cuda_kernels::RowFeature RowFeatureOf(FeatureMap map) {
  switch (map) {
    case FeatureMap::kRelu:
      return cuda_kernels::RowFeature::kRelu;
    case FeatureMap::kElu1:
      return cuda_kernels::RowFeature::kElu1;
    case FeatureMap::kSqr:
      return cuda_kernels::RowFeature::kSqr;
    case FeatureMap::kFavor:
      break;
  }
  TORCH_CHECK(false, "CUDA row kernels: FAVOR+ is not an elementwise feature map");
  return cuda_kernels::RowFeature::kSqr;  // not reached
}

template <typename T>
void CheckDense(std::initializer_list<const at::Tensor*> tensors, const char* what) {
  for (const at::Tensor* t : tensors) {
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == c10::CppTypeToScalarType<T>::value, what,
                ": every tensor must be contiguous and of the kernels' dtype");
  }
}

// Runs a grid-stride body where `like` lives: on emulated threads over CPU tensors, else as the
// CUDA kernel `launch` (null in builds without the kernels) on the device's current stream.
template <typename Args>
struct Kernel {  // a body and its launcher, for one Args (a member typedef: not deduced from)
  using Body = void (*)(const EmulatedThreads&, const Args&);
  using Launcher = const char* (*)(const Args&, CUstream_st*);
};

template <typename Args>
void Run(FusedKernel kind, const at::Tensor& like, const char* what, const Args& args,
         typename Kernel<Args>::Body body, typename Kernel<Args>::Launcher launch) {
  if (like.is_cpu()) {
    RunEmulatedThreadBlock(kEmulatedGridThreads, [&](const EmulatedThreads& t) { body(t, args); });
  } else {
    TORCH_CHECK(launch != nullptr, "CUDA row kernels: this build has no CUDA kernels (", what, ")");
#if defined(SLIMFIT_WITH_CUDA_KERNELS)
    const c10::cuda::CUDAGuard guard(like.device());
    const char* error = launch(args, c10::cuda::getCurrentCUDAStream(like.device().index()).stream());
    TORCH_CHECK(error == nullptr, "CUDA row kernels: ", what,
                " did not launch (or an earlier asynchronous CUDA error surfaced): ", error);
#endif
  }
  CountFusedKernelRun(kind);
}

#if defined(SLIMFIT_WITH_CUDA_KERNELS)
#define SLIMFIT_LAUNCHER(f) (&cuda_kernels::f)
#else
#define SLIMFIT_LAUNCHER(f) nullptr
#endif

template <typename T>
void SplitHeadsAs(FeatureMap map, const at::Tensor& qkv, int64_t heads, at::Tensor& phi, at::Tensor& v) {
  Run(FusedKernel::kSplitHeads, qkv, "split heads", internal::SplitHeadsArgsOf<T>(map, qkv, heads, phi, v),
      &cuda_kernels::SplitHeadsBody<T, EmulatedThreads>, SLIMFIT_LAUNCHER(LaunchSplitHeads<T>));
}

template <typename T>
void JoinHeadGradientsAs(FeatureMap map, const at::Tensor& qkv, const at::Tensor& g_phi_q,
                         const at::Tensor& g_phi_k, const at::Tensor& g_v, at::Tensor& g_qkv) {
  Run(FusedKernel::kJoinHeadGradients, qkv, "join head gradients",
      internal::JoinHeadGradientsArgsOf<T>(map, qkv, g_phi_q, g_phi_k, g_v, g_qkv),
      &cuda_kernels::JoinHeadGradientsBody<T, EmulatedThreads>, SLIMFIT_LAUNCHER(LaunchJoinHeadGradients<T>));
}

template <typename T>
void NormalizeAttentionAs(const at::Tensor& num, const at::Tensor& den, double eps, at::Tensor& den_eps,
                          at::Tensor& attention) {
  Run(FusedKernel::kNormalizeAttention, num, "normalise attention",
      internal::NormalizeAttentionArgsOf<T>(num, den, eps, den_eps, attention),
      &cuda_kernels::NormalizeAttentionBody<T, EmulatedThreads>,
      SLIMFIT_LAUNCHER(LaunchNormalizeAttention<T>));
}

template <typename T>
void NormalizeAttentionBackwardAs(const at::Tensor& g_attention, const at::Tensor& attention,
                                  const at::Tensor& den_eps, at::Tensor& g_num, at::Tensor& g_den) {
  Run(FusedKernel::kNormalizeAttentionBackward, g_attention, "normalise attention backward",
      internal::NormalizeAttentionBackwardArgsOf<T>(g_attention, attention, den_eps, g_num, g_den),
      &cuda_kernels::NormalizeAttentionBackwardBody<T, EmulatedThreads>,
      SLIMFIT_LAUNCHER(LaunchNormalizeAttentionBackward<T>));
}

template <typename T>
void AddColumnSumsAs(at::Tensor& sink, const at::Tensor& g) {
  Run(FusedKernel::kColumnSums, g, "column sums", internal::AddColumnSumsArgsOf<T>(sink, g),
      &cuda_kernels::AddColumnSumsBody<T, EmulatedThreads>, SLIMFIT_LAUNCHER(LaunchAddColumnSums<T>));
}

template <typename T>
void LayerNormBackwardAs(const at::Tensor& g, const at::Tensor& x, const at::Tensor& mean,
                         const at::Tensor& rstd, const at::Tensor& weight, at::Tensor& g_x,
                         at::Tensor& sink_weight, at::Tensor& sink_bias) {
  Run(FusedKernel::kLayerNormBackward, g, "LayerNorm backward",
      internal::LayerNormBackwardArgsOf<T>(g, x, mean, rstd, weight, g_x, sink_weight, sink_bias),
      &cuda_kernels::LayerNormBackwardBody<T, EmulatedThreads>, SLIMFIT_LAUNCHER(LaunchLayerNormBackward<T>));
}

template <typename T>
void EmbedAs(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& embedding,
             const at::Tensor& frequencies, at::Tensor& x0) {
  Run(FusedKernel::kEmbed, x0, "embedding",
      internal::EmbedArgsOf<T>(tokens, positions, embedding, frequencies, x0),
      &cuda_kernels::EmbedBody<T, EmulatedThreads>, SLIMFIT_LAUNCHER(LaunchEmbed<T>));
}

template <typename T>
void LayerNormAddAs(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                    const at::Tensor& residual, at::Tensor& y, at::Tensor& mean, at::Tensor& rstd) {
  Run(FusedKernel::kLayerNormAdd, x, "LayerNorm and residual",
      internal::LayerNormAddArgsOf<T>(x, weight, bias, eps, residual, y, mean, rstd),
      &cuda_kernels::LayerNormAddBody<T, EmulatedThreads>, SLIMFIT_LAUNCHER(LaunchLayerNormAdd<T>));
}

#undef SLIMFIT_LAUNCHER

}  // namespace

bool LayerKernelsCudaApply(std::initializer_list<const at::Tensor*> tensors) {
  return FusedCudaKernelsTakeAll(tensors, /*contiguous=*/true);
}

void EmbedCuda(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& embedding,
               const at::Tensor& frequencies, at::Tensor& x0) {
  x0.scalar_type() == at::kFloat ? EmbedAs<float>(tokens, positions, embedding, frequencies, x0)
                                 : EmbedAs<double>(tokens, positions, embedding, frequencies, x0);
}

void LayerNormAddCuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                      const at::Tensor& residual, at::Tensor& y, at::Tensor& mean, at::Tensor& rstd) {
  x.scalar_type() == at::kFloat ? LayerNormAddAs<float>(x, weight, bias, eps, residual, y, mean, rstd)
                                : LayerNormAddAs<double>(x, weight, bias, eps, residual, y, mean, rstd);
}

void SplitHeadsCuda(FeatureMap map, const at::Tensor& qkv, int64_t heads, at::Tensor& phi, at::Tensor& v) {
  qkv.scalar_type() == at::kFloat ? SplitHeadsAs<float>(map, qkv, heads, phi, v)
                                  : SplitHeadsAs<double>(map, qkv, heads, phi, v);
}

void JoinHeadGradientsCuda(FeatureMap map, const at::Tensor& qkv, const at::Tensor& g_phi_q,
                           const at::Tensor& g_phi_k, const at::Tensor& g_v, at::Tensor& g_qkv) {
  qkv.scalar_type() == at::kFloat ? JoinHeadGradientsAs<float>(map, qkv, g_phi_q, g_phi_k, g_v, g_qkv)
                                  : JoinHeadGradientsAs<double>(map, qkv, g_phi_q, g_phi_k, g_v, g_qkv);
}

void NormalizeAttentionCuda(const at::Tensor& num, const at::Tensor& den, double eps, at::Tensor& den_eps,
                            at::Tensor& attention) {
  num.scalar_type() == at::kFloat ? NormalizeAttentionAs<float>(num, den, eps, den_eps, attention)
                                  : NormalizeAttentionAs<double>(num, den, eps, den_eps, attention);
}

void NormalizeAttentionBackwardCuda(const at::Tensor& g_attention, const at::Tensor& attention,
                                    const at::Tensor& den_eps, at::Tensor& g_num, at::Tensor& g_den) {
  g_attention.scalar_type() == at::kFloat
      ? NormalizeAttentionBackwardAs<float>(g_attention, attention, den_eps, g_num, g_den)
      : NormalizeAttentionBackwardAs<double>(g_attention, attention, den_eps, g_num, g_den);
}

void AddColumnSumsCuda(at::Tensor& sink, const at::Tensor& g) {
  g.scalar_type() == at::kFloat ? AddColumnSumsAs<float>(sink, g) : AddColumnSumsAs<double>(sink, g);
}

void LayerNormBackwardCuda(const at::Tensor& g, const at::Tensor& x, const at::Tensor& mean,
                           const at::Tensor& rstd, const at::Tensor& weight, at::Tensor& g_x,
                           at::Tensor& sink_weight, at::Tensor& sink_bias) {
  g.scalar_type() == at::kFloat
      ? LayerNormBackwardAs<float>(g, x, mean, rstd, weight, g_x, sink_weight, sink_bias)
      : LayerNormBackwardAs<double>(g, x, mean, rstd, weight, g_x, sink_weight, sink_bias);
}

namespace internal {

template <typename T>
cuda_kernels::SplitHeadsArgs<T> SplitHeadsArgsOf(FeatureMap map, const at::Tensor& qkv, int64_t heads,
                                                 at::Tensor& phi, at::Tensor& v) {
  CheckDense<T>({&qkv, &phi, &v}, "split heads");
  TORCH_CHECK(heads >= 1 && qkv.dim() == 2 && qkv.size(1) % (3 * heads) == 0, "split heads: qkv ",
              qkv.sizes(), " is not [S, 3d] for ", heads, " heads");
  const int64_t rows = qkv.size(0), h = qkv.size(1) / (3 * heads);
  TORCH_CHECK(
      phi.sizes() == at::IntArrayRef({2, heads, rows, h}) && v.sizes() == at::IntArrayRef({heads, rows, h}),
      "split heads: outputs ", phi.sizes(), " and ", v.sizes(), " do not match qkv ", qkv.sizes());
  cuda_kernels::SplitHeadsArgs<T> a;
  a.shape = {rows, heads, h};
  a.feature = RowFeatureOf(map);
  a.qkv = qkv.data_ptr<T>();
  a.phi = phi.data_ptr<T>();
  a.v = v.data_ptr<T>();
  return a;
}

template <typename T>
cuda_kernels::JoinHeadGradientsArgs<T> JoinHeadGradientsArgsOf(FeatureMap map, const at::Tensor& qkv,
                                                               const at::Tensor& g_phi_q,
                                                               const at::Tensor& g_phi_k,
                                                               const at::Tensor& g_v, at::Tensor& g_qkv) {
  CheckDense<T>({&qkv, &g_phi_q, &g_phi_k, &g_v, &g_qkv}, "join head gradients");
  TORCH_CHECK(g_v.dim() == 3 && g_phi_q.sizes() == g_v.sizes() && g_phi_k.sizes() == g_v.sizes() &&
                  qkv.sizes() == at::IntArrayRef({g_v.size(1), 3 * g_v.size(0) * g_v.size(2)}) &&
                  g_qkv.sizes() == qkv.sizes(),
              "join head gradients: qkv ", qkv.sizes(), ", head gradients ", g_v.sizes(), " and output ",
              g_qkv.sizes(), " do not match");
  cuda_kernels::JoinHeadGradientsArgs<T> a;
  a.shape = {g_v.size(1), g_v.size(0), g_v.size(2)};
  a.feature = RowFeatureOf(map);
  a.qkv = qkv.data_ptr<T>();
  a.g_phi_q = g_phi_q.data_ptr<T>();
  a.g_phi_k = g_phi_k.data_ptr<T>();
  a.g_v = g_v.data_ptr<T>();
  a.g_qkv = g_qkv.data_ptr<T>();
  return a;
}

template <typename T>
cuda_kernels::NormalizeAttentionArgs<T> NormalizeAttentionArgsOf(const at::Tensor& num, const at::Tensor& den,
                                                                 double eps, at::Tensor& den_eps,
                                                                 at::Tensor& attention) {
  CheckDense<T>({&num, &den, &den_eps, &attention}, "normalise attention");
  TORCH_CHECK(num.dim() == 3 && den.sizes() == num.sizes().slice(0, 2) && den_eps.sizes() == den.sizes() &&
                  attention.sizes() == at::IntArrayRef({num.size(1), num.size(0) * num.size(2)}),
              "normalise attention: numerator ", num.sizes(), ", denominator ", den.sizes(), " and outputs ",
              den_eps.sizes(), ", ", attention.sizes(), " do not match");
  cuda_kernels::NormalizeAttentionArgs<T> a;
  a.shape = {num.size(1), num.size(0), num.size(2)};
  a.eps = static_cast<T>(eps);
  a.numerator = num.data_ptr<T>();
  a.denominator = den.data_ptr<T>();
  a.denominator_eps = den_eps.data_ptr<T>();
  a.attention = attention.data_ptr<T>();
  return a;
}

template <typename T>
cuda_kernels::NormalizeAttentionBackwardArgs<T> NormalizeAttentionBackwardArgsOf(
    const at::Tensor& g_attention, const at::Tensor& attention, const at::Tensor& den_eps, at::Tensor& g_num,
    at::Tensor& g_den) {
  CheckDense<T>({&g_attention, &attention, &den_eps, &g_num, &g_den}, "normalise attention backward");
  TORCH_CHECK(g_num.dim() == 3 && den_eps.sizes() == g_num.sizes().slice(0, 2) &&
                  g_den.sizes() == den_eps.sizes() &&
                  g_attention.sizes() == at::IntArrayRef({g_num.size(1), g_num.size(0) * g_num.size(2)}) &&
                  attention.sizes() == g_attention.sizes(),
              "normalise attention backward: gradient ", g_attention.sizes(), ", attention ",
              attention.sizes(), ", denominator ", den_eps.sizes(), " and outputs ", g_num.sizes(), ", ",
              g_den.sizes(), " do not match");
  cuda_kernels::NormalizeAttentionBackwardArgs<T> a;
  a.shape = {g_num.size(1), g_num.size(0), g_num.size(2)};
  a.g_attention = g_attention.data_ptr<T>();
  a.attention = attention.data_ptr<T>();
  a.denominator_eps = den_eps.data_ptr<T>();
  a.g_numerator = g_num.data_ptr<T>();
  a.g_denominator = g_den.data_ptr<T>();
  return a;
}

template <typename T>
cuda_kernels::EmbedArgs<T> EmbedArgsOf(const at::Tensor& tokens, const at::Tensor& positions,
                                       const at::Tensor& embedding, const at::Tensor& frequencies,
                                       at::Tensor& x0) {
  CheckDense<T>({&embedding, &frequencies, &x0}, "embedding");
  TORCH_CHECK(tokens.scalar_type() == at::kLong && positions.scalar_type() == at::kLong &&
                  tokens.is_contiguous() && positions.is_contiguous() && tokens.device() == x0.device() &&
                  positions.device() == x0.device(),
              "embedding: tokens and positions must be contiguous int64 tensors on the output's device");
  const int64_t rows = x0.size(0), d = x0.dim() == 2 ? x0.size(1) : 0;
  TORCH_CHECK(x0.dim() == 2 && d % 4 == 0 && embedding.dim() == 2 && embedding.size(1) * 2 == d &&
                  frequencies.sizes() == at::IntArrayRef({d / 4}) &&
                  tokens.sizes() == at::IntArrayRef({rows}) && positions.sizes() == tokens.sizes(),
              "embedding: tokens ", tokens.sizes(), ", positions ", positions.sizes(), ", table ",
              embedding.sizes(), ", frequencies ", frequencies.sizes(), " and output ", x0.sizes(),
              " do not match");
  cuda_kernels::EmbedArgs<T> a;
  a.rows = rows;
  a.d = d;
  a.vocab = embedding.size(0);
  a.tokens = tokens.data_ptr<int64_t>();
  a.positions = positions.data_ptr<int64_t>();
  a.embedding = embedding.data_ptr<T>();
  a.frequencies = frequencies.data_ptr<T>();
  a.x0 = x0.data_ptr<T>();
  return a;
}

template <typename T>
cuda_kernels::LayerNormAddArgs<T> LayerNormAddArgsOf(const at::Tensor& x, const at::Tensor& weight,
                                                     const at::Tensor& bias, double eps,
                                                     const at::Tensor& residual, at::Tensor& y,
                                                     at::Tensor& mean, at::Tensor& rstd) {
  CheckDense<T>({&x, &weight, &bias, &residual, &y, &mean, &rstd}, "LayerNorm and residual");
  TORCH_CHECK(x.dim() == 2 && weight.sizes() == at::IntArrayRef({x.size(1)}) &&
                  bias.sizes() == weight.sizes() && residual.sizes() == x.sizes() && y.sizes() == x.sizes() &&
                  mean.numel() == x.size(0) && rstd.numel() == x.size(0),
              "LayerNorm and residual: x ", x.sizes(), ", weight ", weight.sizes(), ", residual ",
              residual.sizes(), " and outputs ", y.sizes(), ", ", mean.sizes(), " do not match");
  cuda_kernels::LayerNormAddArgs<T> a;
  a.rows = x.size(0);
  a.n = x.size(1);
  a.eps = static_cast<T>(eps);
  a.x = x.data_ptr<T>();
  a.weight = weight.data_ptr<T>();
  a.bias = bias.data_ptr<T>();
  a.residual = residual.data_ptr<T>();
  a.y = y.data_ptr<T>();
  a.mean = mean.data_ptr<T>();
  a.rstd = rstd.data_ptr<T>();
  return a;
}

template <typename T>
cuda_kernels::AddColumnSumsArgs<T> AddColumnSumsArgsOf(at::Tensor& sink, const at::Tensor& g) {
  CheckDense<T>({&sink, &g}, "column sums");
  TORCH_CHECK(g.dim() == 2 && sink.dim() == 1 && sink.size(0) == g.size(1), "column sums: sink ",
              sink.sizes(), " does not match ", g.sizes());
  cuda_kernels::AddColumnSumsArgs<T> a;
  a.rows = g.size(0);
  a.n = g.size(1);
  a.g = g.data_ptr<T>();
  a.sink = sink.data_ptr<T>();
  return a;
}

template <typename T>
cuda_kernels::LayerNormBackwardArgs<T> LayerNormBackwardArgsOf(const at::Tensor& g, const at::Tensor& x,
                                                               const at::Tensor& mean, const at::Tensor& rstd,
                                                               const at::Tensor& weight, at::Tensor& g_x,
                                                               at::Tensor& sink_weight,
                                                               at::Tensor& sink_bias) {
  CheckDense<T>({&g, &x, &mean, &rstd, &weight, &g_x, &sink_weight, &sink_bias}, "LayerNorm backward");
  TORCH_CHECK(x.dim() == 2 && g.sizes() == x.sizes() && g_x.sizes() == x.sizes() &&
                  mean.numel() == x.size(0) && rstd.numel() == x.size(0) &&
                  weight.sizes() == at::IntArrayRef({x.size(1)}) && sink_weight.sizes() == weight.sizes() &&
                  sink_bias.sizes() == weight.sizes(),
              "LayerNorm backward: x ", x.sizes(), ", g ", g.sizes(), ", mean ", mean.sizes(), ", rstd ",
              rstd.sizes(), ", weight ", weight.sizes(), " and outputs do not match");
  cuda_kernels::LayerNormBackwardArgs<T> a;
  a.rows = x.size(0);
  a.n = x.size(1);
  a.g = g.data_ptr<T>();
  a.x = x.data_ptr<T>();
  a.mean = mean.data_ptr<T>();
  a.rstd = rstd.data_ptr<T>();
  a.weight = weight.data_ptr<T>();
  a.g_x = g_x.data_ptr<T>();
  a.sink_weight = sink_weight.data_ptr<T>();
  a.sink_bias = sink_bias.data_ptr<T>();
  return a;
}

#define SLIMFIT_INSTANTIATE(T)                                                                              \
  template cuda_kernels::SplitHeadsArgs<T> SplitHeadsArgsOf<T>(FeatureMap, const at::Tensor&, int64_t,      \
                                                               at::Tensor&, at::Tensor&);                   \
  template cuda_kernels::JoinHeadGradientsArgs<T> JoinHeadGradientsArgsOf<T>(                               \
      FeatureMap, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&); \
  template cuda_kernels::NormalizeAttentionArgs<T> NormalizeAttentionArgsOf<T>(                             \
      const at::Tensor&, const at::Tensor&, double, at::Tensor&, at::Tensor&);                              \
  template cuda_kernels::NormalizeAttentionBackwardArgs<T> NormalizeAttentionBackwardArgsOf<T>(             \
      const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&);                   \
  template cuda_kernels::EmbedArgs<T> EmbedArgsOf<T>(const at::Tensor&, const at::Tensor&,                  \
                                                     const at::Tensor&, const at::Tensor&, at::Tensor&);    \
  template cuda_kernels::LayerNormAddArgs<T> LayerNormAddArgsOf<T>(                                         \
      const at::Tensor&, const at::Tensor&, const at::Tensor&, double, const at::Tensor&, at::Tensor&,      \
      at::Tensor&, at::Tensor&);                                                                            \
  template cuda_kernels::AddColumnSumsArgs<T> AddColumnSumsArgsOf<T>(at::Tensor&, const at::Tensor&);       \
  template cuda_kernels::LayerNormBackwardArgs<T> LayerNormBackwardArgsOf<T>(                               \
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,        \
      at::Tensor&, at::Tensor&, at::Tensor&);
SLIMFIT_INSTANTIATE(float)
SLIMFIT_INSTANTIATE(double)
#undef SLIMFIT_INSTANTIATE

}  // namespace internal
}  // namespace slimfit::performer
