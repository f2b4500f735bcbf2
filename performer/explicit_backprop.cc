#include "performer/explicit_backprop.h"

#include <ATen/core/Reduction.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>
#include <tuple>
#include <utility>

#include "performer/layer_kernels_cpu.h"
#include "performer/layer_kernels_cuda.h"
#include "performer/matrix_products.h"
#include "performer/performer_model.h"

namespace slimfit::performer::internal {
namespace {

constexpr int64_t kIgnoreIndex = -100;  // nll_loss's default: no target is ignored

// No autograd recording and no autograd dispatch at all: everything below is plain arithmetic.
struct PlainArithmetic {
  at::NoGradGuard no_grad;
  c10::impl::ExcludeDispatchKeyGuard below_autograd{c10::autograd_dispatch_keyset_with_ADInplaceOrView};
};

at::Tensor Rows(const at::Tensor& t, int64_t begin, int64_t end) { return t.narrow(1, begin, end - begin); }

// [S, 3d] as [3, k, S, head_dim] (q | k | v, heads split): a view.
at::Tensor HeadsOf(const at::Tensor& qkv, int64_t heads) {
  const int64_t rows = qkv.size(0);
  const int64_t d = qkv.size(1) / 3;
  return qkv.view({rows, 3, heads, d / heads}).permute({1, 2, 0, 3});
}

// [S, d] as [k, S, head_dim]: a view.
at::Tensor HeadMajor(const at::Tensor& rows_by_d, int64_t heads) {
  const int64_t rows = rows_by_d.size(0);
  return rows_by_d.view({rows, heads, rows_by_d.size(1) / heads}).transpose(0, 1);
}

// FAVOR+'s scaling of q and k before the projection (performer_model.cc's Features): head_dim^(−1/4).
double FavorScale(const at::Tensor& raw) { return std::pow(static_cast<double>(raw.size(-1)), -0.25); }

// φ(raw) into `out`, the kernels autograd's forms of Features run. raw: [..., k, S, head_dim];
// out: the same, with M = projection.size(2) features for FAVOR+ (Choromanski et al., positive
// random features: φ(x) = exp(s·W − |s|²/2) with s = x·head_dim^(−1/4), W = `projection`
// [k, head_dim, M]; undefined for the other maps).
void FeaturesInto(FeatureMap map, const at::Tensor& raw, const at::Tensor& projection, at::Tensor& out) {
  switch (map) {
    case FeatureMap::kRelu:
      at::clamp_min_out(out, raw, 0);
      return;
    case FeatureMap::kElu1:
      at::elu_out(out, raw);
      out.add_(1);
      return;
    case FeatureMap::kSqr:
      at::mul_out(out, raw, raw);
      return;
    case FeatureMap::kFavor: {
      const at::Tensor scaled = raw * FavorScale(raw);
      const at::Tensor half_norms = (scaled * scaled).sum(-1, true).mul_(0.5);
      at::matmul_out(out, scaled, projection).sub_(half_norms).exp_();
      return;
    }
  }
  TORCH_CHECK(false, "explicit backprop: unknown feature map");
}

// ∂φ/∂raw · g_phi into `out`; `phi` is φ(raw) (FAVOR+ reads it, the others do not).
void FeatureGradientInto(FeatureMap map, const at::Tensor& raw, const at::Tensor& phi,
                         const at::Tensor& projection, const at::Tensor& g_phi, at::Tensor out) {
  switch (map) {
    case FeatureMap::kRelu:
      at::threshold_backward_out(out, g_phi, raw, 0);
      return;
    case FeatureMap::kElu1:
      at::elu_backward_out(out, g_phi, 1, 1, 1, /*is_result=*/false, raw);
      return;
    case FeatureMap::kSqr:
      at::mul_out(out, raw, g_phi);
      out.mul_(2);
      return;  // g·x + g·x, as autograd
    case FeatureMap::kFavor: {
      // With a = s·W − |s|²/2 and φ = exp(a): ∂/∂a = g_phi·φ, ∂/∂s = (∂/∂a)·Wᵀ − s·Σ_m ∂/∂a_m.
      const double scale = FavorScale(raw);
      const at::Tensor g_a = g_phi * phi;
      const at::Tensor sums = g_a.sum(-1, true).mul_(scale);
      at::mul_out(out, at::matmul(g_a, projection.transpose(-1, -2)).addcmul_(raw, sums, -1), scale);
      return;
    }
  }
  TORCH_CHECK(false, "explicit backprop: unknown feature map");
}

// Layer r's FAVOR+ projection [k, head_dim, M], or undefined for the other feature maps.
at::Tensor ProjectionOf(const Context& ctx, int64_t r) {
  return ctx.config.feature_map == FeatureMap::kFavor ? ctx.projections[r] : at::Tensor();
}

// Whether the CPU's row kernels split and join heads for this map (they serve the elementwise maps).
bool HeadKernelsApply(FeatureMap map, const at::Tensor& qkv) {
  return map != FeatureMap::kFavor && LayerKernelsApply(qkv);
}

// The same for the GPU's (layer_kernels_cuda.h; built by the CUDA build, off unless enabled).
bool HeadKernelsCudaApply(FeatureMap map, std::initializer_list<const at::Tensor*> tensors) {
  return map != FeatureMap::kFavor && LayerKernelsCudaApply(tensors);
}

bool KernelsApply(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors) {
    if (!LayerKernelsApply(*t)) return false;
  }
  return true;
}

// Contiguous int64 indices on `like`'s device (what the CUDA embedding reads).
bool IndicesOn(const at::Tensor& indices, const at::Tensor& like) {
  return indices.scalar_type() == at::kLong && indices.is_contiguous() && indices.device() == like.device();
}

// The arithmetic-heavy kernels (LayerNorm, GELU, column sums) serve small slices, where a LibTorch
// call costs more than its arithmetic; from this many rows on LibTorch's own kernels (vectorised
// for the CPU found at run time, parallel) are faster.
constexpr int64_t kFewRows = 512;

bool FewRows(const at::Tensor& t) { return t.size(0) < kFewRows; }

void AddColumnSums(at::Tensor& sink, const at::Tensor& g) {
  if (LayerKernelsApply(sink) && LayerKernelsApply(g) && FewRows(g)) {
    AddColumnSumsCpu(sink, g);
  } else if (LayerKernelsCudaApply({&g, &sink}) && FewRows(g)) {
    AddColumnSumsCuda(sink, g);
  } else {
    sink.add_(g.sum(0));
  }
}

at::Tensor Gelu(const at::Tensor& u) {
  if (!LayerKernelsApply(u) || !FewRows(u)) return at::gelu(u);
  at::Tensor hidden = at::empty_like(u);
  GeluCpu(u, hidden);
  return hidden;
}

at::Tensor GeluBackward(const at::Tensor& g_hidden, const at::Tensor& u) {
  if (!KernelsApply({&g_hidden, &u}) || !FewRows(u)) return at::gelu_backward(g_hidden, u);
  at::Tensor g_u = at::empty_like(u);
  GeluBackwardCpu(g_hidden, u, g_u);
  return g_u;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> Normalize(const at::Tensor& x, const at::Tensor& weight,
                                                         const at::Tensor& bias) {
  if (!KernelsApply({&x, &weight, &bias}) || !FewRows(x)) {
    return at::native_layer_norm(x, {x.size(1)}, weight, bias, kLayerNormEps);
  }
  at::Tensor y = at::empty_like(x);
  at::Tensor mean = at::empty({x.size(0), 1}, x.options());
  at::Tensor rstd = at::empty({x.size(0), 1}, x.options());
  LayerNormCpu(x, weight, bias, kLayerNormEps, y, mean, rstd);
  return {y, mean, rstd};
}

// Normalize(x) + residual (post-LN's residual connection), with the rows' mean and rstd: one GPU
// kernel where it applies, else Normalize and an addition.
std::tuple<at::Tensor, at::Tensor, at::Tensor> NormalizeAndAdd(const at::Tensor& x, const at::Tensor& weight,
                                                               const at::Tensor& bias,
                                                               const at::Tensor& residual) {
  if (LayerKernelsCudaApply({&x, &weight, &bias, &residual}) && FewRows(x)) {
    at::Tensor y = at::empty_like(x);
    at::Tensor mean = at::empty({x.size(0), 1}, x.options());
    at::Tensor rstd = at::empty({x.size(0), 1}, x.options());
    LayerNormAddCuda(x, weight, bias, kLayerNormEps, residual, y, mean, rstd);
    return {y, mean, rstd};
  }
  auto [y, mean, rstd] = Normalize(x, weight, bias);
  y.add_(residual);
  return {y, mean, rstd};
}

// The input's gradient of a LayerNorm; its weight and bias gradients go into the sinks.
at::Tensor NormalizeBackward(const at::Tensor& g, const at::Tensor& input, const at::Tensor& mean,
                             const at::Tensor& rstd, const at::Tensor& weight, const at::Tensor& bias,
                             at::Tensor& sink_weight, at::Tensor& sink_bias) {
  if (KernelsApply({&g, &input, &mean, &rstd, &weight, &sink_weight, &sink_bias}) && FewRows(g)) {
    at::Tensor g_input = at::empty_like(input);
    LayerNormBackwardCpu(g, input, mean, rstd, weight, g_input, sink_weight, sink_bias);
    return g_input;
  }
  if (LayerKernelsCudaApply({&g, &input, &mean, &rstd, &weight, &sink_weight, &sink_bias}) && FewRows(g)) {
    at::Tensor g_input = at::empty_like(input);
    LayerNormBackwardCuda(g, input, mean, rstd, weight, g_input, sink_weight, sink_bias);
    return g_input;
  }
  auto [g_input, g_weight, g_bias] =
      at::native_layer_norm_backward(g, input, {input.size(1)}, mean, rstd, weight, bias, {true, true, true});
  sink_weight.add_(g_weight);
  sink_bias.add_(g_bias);
  return g_input;
}

// sink += xᵀ·g, batched over slices where the call asked for it (Context::weight_gradients), in
// the call's product dtype (bfloat16 products: x and g rounded, the product rounded and added in
// float32, as autograd's linear maps do: performer_model.cc).
void AddWeightGradient(const Context& ctx, at::Tensor& sink, const at::Tensor& x, const at::Tensor& g) {
  if (ctx.weight_gradients != nullptr) {
    ctx.weight_gradients->Add(sink, x, g);
  } else {
    AccumulateProductIn(ctx.weights.products, sink, x.t(), g);
  }
}

Front StartOf(const Segment& segment, const Front& entry, const Front& zero) {
  return segment.continues_front ? entry : zero;
}

// The chunked prefix sums over a stretch's document segments.
PrefixAttentionResult PrefixForward(const at::Tensor& phi_q, const at::Tensor& phi_k, const at::Tensor& v,
                                    const Front& entry, const Front& zero,
                                    const std::vector<Segment>& segments, int64_t block) {
  if (segments.size() == 1)
    return ChunkedPrefixForward(phi_q, phi_k, v, StartOf(segments[0], entry, zero), block);
  PrefixAttentionResult result;
  result.numerator = at::empty(v.sizes(), v.options());
  result.denominator = at::empty({phi_q.size(0), phi_q.size(1)}, v.options());
  for (const Segment& s : segments) {
    PrefixAttentionResult part =
        ChunkedPrefixForward(Rows(phi_q, s.begin, s.end), Rows(phi_k, s.begin, s.end),
                             Rows(v, s.begin, s.end), StartOf(s, entry, zero), block);
    Rows(result.numerator, s.begin, s.end).copy_(part.numerator);
    Rows(result.denominator, s.begin, s.end).copy_(part.denominator);
    result.end = std::move(part.end);
  }
  return result;
}

// Its backward: the gradients of φq, φk, v and of the entry front (undefined when no segment
// continues it).
PrefixGradients PrefixBackward(const at::Tensor& phi_q, const at::Tensor& phi_k, const at::Tensor& v,
                               const Front& entry, const Front& zero, const std::vector<Segment>& segments,
                               int64_t block, const at::Tensor& g_num, const at::Tensor& g_den,
                               const Front& g_exit) {
  if (segments.size() == 1) {
    PrefixGradients g = ChunkedPrefixBackward(phi_q, phi_k, v, StartOf(segments[0], entry, zero), block,
                                              g_num, g_den, g_exit);
    if (!segments[0].continues_front) g.start = Front{};
    return g;
  }
  PrefixGradients result{at::empty_like(phi_q), at::empty_like(phi_k), at::empty_like(v), Front{}};
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    const bool last = i + 1 == segments.size();
    PrefixGradients part =
        ChunkedPrefixBackward(Rows(phi_q, s.begin, s.end), Rows(phi_k, s.begin, s.end),
                              Rows(v, s.begin, s.end), StartOf(s, entry, zero), block,
                              Rows(g_num, s.begin, s.end), Rows(g_den, s.begin, s.end), last ? g_exit : zero);
    Rows(result.phi_q, s.begin, s.end).copy_(part.phi_q);
    Rows(result.phi_k, s.begin, s.end).copy_(part.phi_k);
    Rows(result.v, s.begin, s.end).copy_(part.v);
    if (s.continues_front) result.start = std::move(part.start);
  }
  return result;
}

// Layer r over a stretch: performer_model.h's F, the prefix sums, and (when `need_output`) G.
at::Tensor LayerForward(const Context& ctx, int64_t r, const Stretch& stretch, const at::Tensor& x,
                        const Front& zero, const EntryFn& entry_for_layer, Front* exit, bool need_output,
                        LayerTape* tape) {
  const ModelConfig& c = ctx.config;
  const LayerWeights& w = ctx.weights.layers[r];
  const bool post = c.layernorm == LayerNormPlacement::kPost;
  const int64_t rows = x.size(0);
  // Without a tape every intermediate is released as soon as the forward is past it: the forward
  // sweep runs several slices as one stretch on the premise that a forward without a graph holds a
  // fraction of a slice's tape (sliced_gradient.cc).
  const bool keep = tape != nullptr;
  LayerTape t;
  t.x = x;
  t.h = x;
  if (!post) std::tie(t.h, t.h_mean, t.h_rstd) = Normalize(x, w.norm1_weight, w.norm1_bias);
  t.qkv = AddBiasProductIn(w.products, w.qkv_bias, t.h, w.qkv_weight_t);
  t.phi = at::empty({2, c.heads, rows, c.features_per_head()}, x.options());
  if (HeadKernelsApply(c.feature_map, t.qkv)) {
    t.v = at::empty({c.heads, rows, c.head_dim()}, x.options());
    SplitHeadsCpu(c.feature_map, t.qkv, c.heads, t.phi, t.v);
  } else if (HeadKernelsCudaApply(c.feature_map, {&t.qkv, &t.phi})) {
    t.v = at::empty({c.heads, rows, c.head_dim()}, x.options());
    SplitHeadsCuda(c.feature_map, t.qkv, c.heads, t.phi, t.v);
  } else {
    const at::Tensor heads = HeadsOf(t.qkv, c.heads);
    FeaturesInto(c.feature_map, heads.narrow(0, 0, 2), ProjectionOf(ctx, r), t.phi);
    t.v = heads.select(0, 2).contiguous();
  }
  if (!keep) t.h = t.qkv = at::Tensor();
  AttentionInputs in{t.phi.select(0, 0), t.phi.select(0, 1), t.v, x};
  t.entry = entry_for_layer(r, in);
  PrefixAttentionResult prefix =
      PrefixForward(in.phi_q, in.phi_k, t.v, t.entry, zero, stretch.layout.segments, ctx.block);
  *exit = std::move(prefix.end);
  if (!keep) {
    in = AttentionInputs();
    t.phi = t.v = at::Tensor();
    t.entry = Front();
  }
  if (!need_output) return at::Tensor();

  t.attention = at::empty({rows, c.d_model}, x.options());
  if (KernelsApply({&prefix.numerator, &prefix.denominator})) {
    t.denominator_eps = at::empty_like(prefix.denominator);
    NormalizeAttentionCpu(prefix.numerator, prefix.denominator, kDenominatorEps, t.denominator_eps,
                          t.attention);
  } else if (LayerKernelsCudaApply({&prefix.numerator, &prefix.denominator, &t.attention})) {
    t.denominator_eps = at::empty_like(prefix.denominator);
    NormalizeAttentionCuda(prefix.numerator, prefix.denominator, kDenominatorEps, t.denominator_eps,
                           t.attention);
  } else {
    t.denominator_eps = prefix.denominator.add(kDenominatorEps);
    at::Tensor attention_heads = HeadMajor(t.attention, c.heads);
    at::div_out(attention_heads, prefix.numerator, t.denominator_eps.unsqueeze(2));
  }
  prefix = PrefixAttentionResult();
  if (post) {
    std::tie(t.x1, t.a_mean, t.a_rstd) = NormalizeAndAdd(t.attention, w.norm1_weight, w.norm1_bias, x);
  } else {
    t.x1 = x + t.attention;
  }
  if (!keep) t.attention = t.denominator_eps = at::Tensor();
  t.ffn_input = t.x1;
  if (!post) std::tie(t.ffn_input, t.f_mean, t.f_rstd) = Normalize(t.x1, w.norm2_weight, w.norm2_bias);
  t.u = AddBiasProductIn(w.products, w.ffn_in_bias, t.ffn_input,
                         ForwardOperand(w.ffn_in_forward_t, w.ffn_in_weight_t));
  t.hidden = Gelu(t.u);
  if (!keep) t.u = t.ffn_input = at::Tensor();
  at::Tensor o = AddBiasProductIn(w.products, w.ffn_out_bias, t.hidden,
                                  ForwardOperand(w.ffn_out_forward_t, w.ffn_out_weight_t));
  if (!keep) t.hidden = at::Tensor();
  at::Tensor y;
  if (post) {
    std::tie(y, t.o_mean, t.o_rstd) = NormalizeAndAdd(o, w.norm2_weight, w.norm2_bias, t.x1);
    if (keep) t.o = std::move(o);
    o = at::Tensor();
  } else {
    y = o.add_(t.x1);
  }
  if (keep) *tape = std::move(t);
  return y;
}

// The gradient of layer r's input given that of its output `gy` (and of its outgoing front);
// parameter gradients go into the sinks. Releases the tape's tensors.
at::Tensor LayerBackward(const Context& ctx, int64_t r, const Stretch& stretch, const Front& zero,
                         LayerTape& t, const at::Tensor& gy, const Front& g_exit, Front* g_entry) {
  const ModelConfig& c = ctx.config;
  const LayerWeights& w = ctx.weights.layers[r];
  // The sinks are written through their tensor handles; the struct holding them is shared as const.
  LayerWeights& sink = const_cast<LayerWeights&>(*w.gradient_sink);
  const bool post = c.layernorm == LayerNormPlacement::kPost;
  const int64_t rows = gy.size(0);

  // FFN: y = x1 + [LN2](V·gelu(U·[LN2](x1))).
  at::Tensor g_o = gy;
  if (post) {
    g_o = NormalizeBackward(gy, t.o, t.o_mean, t.o_rstd, w.norm2_weight, w.norm2_bias, sink.norm2_weight,
                            sink.norm2_bias);
    t.o = at::Tensor();
  }
  AddWeightGradient(ctx, sink.ffn_out_weight_t, t.hidden, g_o);
  AddColumnSums(sink.ffn_out_bias, g_o);
  const at::Tensor g_hidden = LinearInputGradient(g_o, {w.ffn_out_weight_t}, w.products);
  t.hidden = at::Tensor();
  const at::Tensor g_u = GeluBackward(g_hidden, t.u);
  t.u = at::Tensor();
  AddWeightGradient(ctx, sink.ffn_in_weight_t, t.ffn_input, g_u);
  AddColumnSums(sink.ffn_in_bias, g_u);
  at::Tensor g_x1 = LinearInputGradient(g_u, {w.ffn_in_weight_t}, w.products);
  if (!post) {
    g_x1 = NormalizeBackward(g_x1, t.x1, t.f_mean, t.f_rstd, w.norm2_weight, w.norm2_bias, sink.norm2_weight,
                             sink.norm2_bias);
  }
  g_x1.add_(gy);
  t.ffn_input = t.x1 = at::Tensor();

  // Attention: x1 = x + [LN1](num / (den + ε)).
  at::Tensor g_attention = g_x1;
  if (post) {
    g_attention = NormalizeBackward(g_x1, t.attention, t.a_mean, t.a_rstd, w.norm1_weight, w.norm1_bias,
                                    sink.norm1_weight, sink.norm1_bias);
  }
  // ∂(num/den)/∂den = −(num/den)/den: g_den = −Σ g_num · attention.
  at::Tensor g_num = at::empty({c.heads, rows, c.head_dim()}, gy.options());
  at::Tensor g_den;
  if (KernelsApply({&g_attention, &t.attention, &t.denominator_eps})) {
    g_den = at::empty_like(t.denominator_eps);
    NormalizeAttentionBackwardCpu(g_attention, t.attention, t.denominator_eps, g_num, g_den);
  } else if (LayerKernelsCudaApply({&g_attention, &t.attention, &t.denominator_eps, &g_num})) {
    g_den = at::empty_like(t.denominator_eps);
    NormalizeAttentionBackwardCuda(g_attention, t.attention, t.denominator_eps, g_num, g_den);
  } else {
    at::div_out(g_num, HeadMajor(g_attention, c.heads), t.denominator_eps.unsqueeze(2));
    g_den = at::mul(g_num, HeadMajor(t.attention, c.heads)).sum(2).neg_();
  }
  t.attention = t.denominator_eps = at::Tensor();
  // F: q, k, v = [LN1](x)·W + b, then φ. The prefix sums' gradients and the views of φ live only in
  // this block: what follows (the qkv weight and input gradients, LN1's backward) holds g_qkv alone.
  at::Tensor g_qkv = at::empty({rows, 3 * c.d_model}, gy.options());
  {
    const at::Tensor phi_q = t.phi.select(0, 0);
    const at::Tensor phi_k = t.phi.select(0, 1);
    PrefixGradients g = PrefixBackward(phi_q, phi_k, t.v, t.entry, zero, stretch.layout.segments, ctx.block,
                                       g_num, g_den, g_exit);
    g_num = g_den = at::Tensor();
    if (g_entry != nullptr) {
      *g_entry = g.start.numerator.defined()
                     ? g.start
                     : Front{at::zeros_like(zero.numerator), at::zeros_like(zero.denominator)};
    }
    t.v = at::Tensor();
    t.entry = Front();
    if (HeadKernelsApply(c.feature_map, t.qkv) && KernelsApply({&g.phi_q, &g.phi_k, &g.v})) {
      JoinHeadGradientsCpu(c.feature_map, t.qkv, g.phi_q, g.phi_k, g.v, g_qkv);
    } else if (HeadKernelsCudaApply(c.feature_map, {&t.qkv, &g.phi_q, &g.phi_k, &g.v, &g_qkv})) {
      JoinHeadGradientsCuda(c.feature_map, t.qkv, g.phi_q, g.phi_k, g.v, g_qkv);
    } else {
      const at::Tensor g_heads = HeadsOf(g_qkv, c.heads);
      const at::Tensor heads = HeadsOf(t.qkv, c.heads);
      const at::Tensor projection = ProjectionOf(ctx, r);
      FeatureGradientInto(c.feature_map, heads.select(0, 0), phi_q, projection, g.phi_q,
                          g_heads.select(0, 0));
      FeatureGradientInto(c.feature_map, heads.select(0, 1), phi_k, projection, g.phi_k,
                          g_heads.select(0, 1));
      g_heads.select(0, 2).copy_(g.v);
    }
    t.qkv = t.phi = at::Tensor();
  }
  AddWeightGradient(ctx, sink.qkv_weight_t, t.h, g_qkv);
  AddColumnSums(sink.qkv_bias, g_qkv);
  at::Tensor g_x = LinearInputGradient(g_qkv, w.qkv_gradient_pieces, w.products);
  if (!post) {
    g_x = NormalizeBackward(g_x, t.x, t.h_mean, t.h_rstd, w.norm1_weight, w.norm1_bias, sink.norm1_weight,
                            sink.norm1_bias);
  }
  t = LayerTape();
  return g_x.add_(g_x1);
}

}  // namespace

bool ExplicitBackpropApplies(bool wanted, const Context& ctx, LayerRecompute recompute) {
  if (!wanted || recompute != LayerRecompute::kNone) return false;
  if (ctx.mode != PrefixMode::kChunked) return false;
  if (ctx.config.feature_map == FeatureMap::kFavor &&
      ctx.projections.size() != static_cast<size_t>(ctx.config.layers)) {
    return false;
  }
  if (ctx.weights.gradient_sink == nullptr || ctx.weights.layers.empty()) return false;
  for (const LayerWeights& w : ctx.weights.layers) {
    if (w.gradient_sink == nullptr || !w.qkv_weight_t.defined()) return false;
  }
  const at::ScalarType dtype = ctx.weights.embedding.scalar_type();
  return dtype == at::kFloat || dtype == at::kDouble;
}

at::Tensor ExplicitForward(const Context& ctx, const Stretch& stretch, const Front& zero,
                           const EntryFn& entry_for_layer, ModelFront* exit, SliceTape* tape) {
  PlainArithmetic plain;
  const ModelConfig& c = ctx.config;
  at::Tensor x;
  const ModelWeights& weights = ctx.weights;
  if (KernelsApply({&weights.embedding, &weights.position_frequencies}) && stretch.tokens.is_contiguous() &&
      stretch.positions.is_contiguous()) {
    x = at::empty({stretch.tokens.size(0), c.d_model}, weights.embedding.options());
    EmbedCpu(stretch.tokens, stretch.positions, weights.embedding, weights.position_frequencies, x);
  } else if (LayerKernelsCudaApply({&weights.embedding, &weights.position_frequencies}) &&
             IndicesOn(stretch.tokens, weights.embedding) &&
             IndicesOn(stretch.positions, weights.embedding)) {
    x = at::empty({stretch.tokens.size(0), c.d_model}, weights.embedding.options());
    EmbedCuda(stretch.tokens, stretch.positions, weights.embedding, weights.position_frequencies, x);
  } else {
    x = EmbedTokens(c, weights, stretch.tokens, stretch.positions);
  }
  exit->resize(c.layers);
  if (tape != nullptr) tape->layers.resize(c.layers);
  for (int64_t r = 0; r < c.layers; ++r) {
    const bool need_output = tape != nullptr || r + 1 < c.layers;
    x = LayerForward(ctx, r, stretch, x, zero, entry_for_layer, &(*exit)[r], need_output,
                     tape != nullptr ? &tape->layers[r] : nullptr);
  }
  if (tape == nullptr) return at::Tensor();
  tape->has_loss = stretch.target_rows.numel() > 0;
  if (!tape->has_loss) return at::zeros({}, x.options());
  const ModelWeights& w = ctx.weights;
  tape->top_rows = x.index_select(0, stretch.target_rows);
  const at::Tensor logits = AddBiasProductIn(w.products, w.output_bias, tape->top_rows,
                                             ForwardOperand(w.output_forward_t, w.output_weight_t));
  at::Tensor loss;
  if (KernelsApply({&logits}) && stretch.targets.is_contiguous()) {
    tape->log_probs = logits;  // made log-probabilities in place
    loss = at::scalar_tensor(LogSoftmaxCrossEntropyCpu(tape->log_probs, stretch.targets), logits.options());
    return loss;
  }
  tape->log_probs = at::log_softmax(logits, 1);
  std::tie(loss, tape->total_weight) =
      at::nll_loss_forward(tape->log_probs, stretch.targets, {}, at::Reduction::Sum, kIgnoreIndex);
  return loss;
}

ModelFront ExplicitBackward(const Context& ctx, const Stretch& stretch, const Front& zero, SliceTape& tape,
                            const at::Tensor& loss_scale, const ModelFront& exit_grad, bool reads_entry) {
  PlainArithmetic plain;
  const ModelConfig& c = ctx.config;
  const ModelWeights& w = ctx.weights;
  ModelWeights& sink = const_cast<ModelWeights&>(*w.gradient_sink);  // written through its handles
  const int64_t rows = stretch.tokens.size(0);
  at::Tensor g = at::zeros({rows, c.d_model}, loss_scale.options());
  if (tape.has_loss) {
    at::Tensor g_logits;
    if (!tape.total_weight.defined()) {  // the forward ran the kernel
      g_logits = at::empty_like(tape.log_probs);
      LogSoftmaxCrossEntropyBackwardCpu(tape.log_probs, stretch.targets, loss_scale.item<float>(), g_logits);
    } else {
      const at::Tensor g_log_probs =
          at::nll_loss_backward(loss_scale, tape.log_probs, stretch.targets, {}, at::Reduction::Sum,
                                kIgnoreIndex, tape.total_weight);
      g_logits = at::_log_softmax_backward_data(g_log_probs, tape.log_probs, 1, tape.log_probs.scalar_type());
    }
    tape.log_probs = tape.total_weight = at::Tensor();
    AddWeightGradient(ctx, sink.output_weight_t, tape.top_rows, g_logits);
    AddColumnSums(sink.output_bias, g_logits);
    const at::Tensor g_top = LinearInputGradient(g_logits, {w.output_weight_t}, w.products);
    if (KernelsApply({&g_top, &g}) && stretch.target_rows.is_contiguous()) {
      AddRowsCpu(stretch.target_rows, g_top, g);
    } else {
      g.index_add_(0, stretch.target_rows, g_top);
    }
    tape.top_rows = at::Tensor();
  }
  ModelFront entry_grad(reads_entry ? c.layers : 0);
  for (int64_t r = c.layers - 1; r >= 0; --r) {
    const Front& g_exit = exit_grad.empty() ? zero : exit_grad[r];
    g = LayerBackward(ctx, r, stretch, zero, tape.layers[r], g, g_exit,
                      reads_entry ? &entry_grad[r] : nullptr);
  }
  // x0 = [E(token) | positional features]: only the embedding columns have a parameter.
  if (KernelsApply({&g, &sink.embedding}) && stretch.tokens.is_contiguous()) {
    EmbedBackwardCpu(stretch.tokens, g, sink.embedding);
  } else {
    sink.embedding.index_add_(0, stretch.tokens, g.narrow(1, 0, c.d_model / 2));
  }
  tape = SliceTape();
  return entry_grad;
}

}  // namespace slimfit::performer::internal
