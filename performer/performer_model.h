// PerformerModel: the parameters of a byte-level causal Performer language model and the row-wise
// pieces of its forward pass, laid out as Likhosherstov et al. §3.1 writes a layer: a row-wise map F before
// the prefix sum and a row-wise map G after it,
//   T, Γ = F(X);  U = PS(T);  X' = G(U, Γ).
// The full-sequence reference gradient and the sliced engine both call these same functions on
// stretches of rows, so they share one implementation.
//
// Architecture (the reference google-research SLiM Performer, generalised to packed documents):
//   x0 = [E(token) (d/2) | sin(pos·f) (d/4) | cos(pos·f) (d/4)], positions restart per document;
//   per layer: q, k, v = Linear(d→d) with bias, heads split, features φ(q), φ(k); no output
//   projection; a = num / (den + 1e-16);
//     post-LN: x += LN1(a(x)); x += LN2(FFN(x))      pre-LN: x += a(LN1(x)); x += FFN(LN2(x))
//   FFN = Linear(d→d_ff) – GELU – Linear(d_ff→d); logits = Linear(d→vocab).
// Parameter names follow the reference's state_dict (`input_map.weight`,
// `layers.0.attention.q_map.weight`, `layers.0.U_map.bias`, `layers.0.layernorm1.weight`,
// `output_logit_map.weight`, …) so checkpoints move both ways.
//
// Thread safety: a PerformerModel is immutable after construction and safe to share across
// threads; the free functions are pure. Nothing may write its parameters in place: models built by
// FromOwnedTensors may share them with other models (a worker's cached versions).
#ifndef SLIMFIT_PERFORMER_PERFORMER_MODEL_H_
#define SLIMFIT_PERFORMER_PERFORMER_MODEL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "performer/model_config.h"
#include "performer/plan.h"

namespace slimfit::performer {

// Linear weights are held transposed, [in, out], so a linear map is one addmm whose weight
// operand is the tensor itself: when that tensor is an autograd leaf its gradient is accumulated
// as soon as it is computed, instead of waiting behind a transpose node until the end of the
// backward pass (which would keep every weight gradient of a slice alive at once).
struct LayerWeights {
  at::Tensor q_weight_t, q_bias, k_weight_t, k_bias, v_weight_t, v_bias;  // attention.{q,k,v}_map
  at::Tensor ffn_in_weight_t, ffn_in_bias;                                // U_map: d → d_ff
  at::Tensor ffn_out_weight_t, ffn_out_bias;                              // V_map: d_ff → d
  at::Tensor norm1_weight, norm1_bias, norm2_weight, norm2_bias;          // layernorm1, layernorm2
  // Optional fused projections [d, 3d] and [3d] (q | k | v): when defined, F runs one matrix
  // product instead of three (PrepareForwardLayouts), and its input gradient multiplies by
  // `qkv_gradient_pieces`: q, k and v's own [out, in] storage where oneDNN runs the products
  // (untransposed operands), the fused copy itself elsewhere.
  at::Tensor qkv_weight_t, qkv_bias;
  std::vector<at::Tensor> qkv_gradient_pieces;
  // Optional contiguous [in, out] copies of the FFN weights for the forward product
  // (PrepareForwardLayouts); the *_weight_t views above then serve only the input gradient.
  at::Tensor ffn_in_forward_t, ffn_out_forward_t;
  // When set, the gradients of the linear maps are added straight into these tensors (same
  // layout) during back-propagation, with one addmm_ and no temporary gradient per weight, instead
  // of flowing to the weights' .grad. The gradient engine uses this to accumulate over slices.
  const LayerWeights* gradient_sink = nullptr;
  // The dtype the linear maps' matrix products run in (forward, input and weight gradients):
  // Undefined for the weights' own; bfloat16 for mixed precision (matrix_products.h,
  // AddBiasProductIn). Everything else — features, prefix sums and fronts, LayerNorm, GELU, the
  // loss, the gradient sums — stays in the weights' dtype.
  at::ScalarType products = at::ScalarType::Undefined;
};

// The model's named pieces over a parameter list in compute layout (tensors share storage).
struct ModelWeights {
  at::Tensor embedding;  // input_map.weight [vocab, d/2]
  std::vector<LayerWeights> layers;
  at::Tensor output_weight_t, output_bias;  // output_logit_map
  at::Tensor output_forward_t;              // optional contiguous [d, vocab] copy, as LayerWeights'
  // exp(−ln(10⁴)·2i/(d/2)) for the positional features; computed by BindWeights.
  at::Tensor position_frequencies;
  // As LayerWeights::gradient_sink, for the embedding and the output map.
  const ModelWeights* gradient_sink = nullptr;
  at::ScalarType products = at::ScalarType::Undefined;  // as LayerWeights::products, for the output map
};

// Canonical parameter names and shapes, in the model's order.
std::vector<std::string> ParameterNames(const ModelConfig& config);
std::vector<std::vector<int64_t>> ParameterShapes(const ModelConfig& config);

// True for the parameters that are linear-map weights ([out, in] in checkpoints).
bool IsLinearWeight(const std::string& name);

// The parameters in compute layout: linear weights transposed to [in, out] (views, no copies).
std::vector<at::Tensor> ToComputeLayout(const std::vector<std::string>& names,
                                        const std::vector<at::Tensor>& parameters);

// REQUIRES: `parameters` in compute layout, in the order of ParameterNames(config).
ModelWeights BindWeights(const ModelConfig& config, const std::vector<at::Tensor>& parameters);

// Whether the engine keeps a contiguous [in, out] copy of every linear weight for the forward
// products: where they run in oneDNN (float32 on the CPU, matrix_products.h), whose kernels take a
// transposed weight at half to two thirds of the speed at the row counts of small slices (even
// through the transposed product, matrix_products.cc), while the parameters' own [out, in] storage
// is what the input gradient wants.
bool CopiesForwardLayouts(const at::Device& device, DType dtype);

// The operand for a weight's forward product: its contiguous *_forward_t copy when one was made,
// the compute-layout view `weight_t` otherwise.
const at::Tensor& ForwardOperand(const at::Tensor& copy, const at::Tensor& weight_t);

// Sets every layer's qkv_weight_t / qkv_bias to the concatenation of its q, k and v projections
// (a copy: 3·d·(d + 1) values per layer) and, with `copy_all`, the *_forward_t copies of the FFN
// and output weights: ModelConfig::forward_layout_values in all.
//
// Mixed precision, `products` a reduced dtype (bfloat16): sets `products` (LayerWeights::products)
// on the weights and every layer's, and makes each linear map's product operand — qkv_weight_t
// (with qkv_gradient_pieces = {it}), the FFN's and the output map's *_weight_t — one contiguous
// [in, out] copy in `products` (ModelConfig::product_weight_values() values; `copy_all` is then
// moot): the weights are rounded once per call instead of in every product, where at the row counts
// of small slices rounding a weight costs more than the product it serves. Each copy is written in
// one pass from the parameter (q, k and v straight into the fused copy), so nothing beyond the
// copies is held. The rounding is the products' own (matrix_products.h), so the products equal
// those that round the float32 weights themselves. The parameters are untouched; qkv_bias stays in
// their dtype. Call once per ModelWeights (the reduced copies replace the views it rounds).
void PrepareForwardLayouts(ModelWeights* weights, bool copy_all,
                           at::ScalarType products = at::ScalarType::Undefined);

// Index of layer r's first attention parameter (q weight) in ParameterNames order; q bias, k
// weight, k bias, v weight and v bias follow.
size_t FirstAttentionParameter(int64_t layer);

at::ScalarType ToScalarType(DType dtype);

// How a fresh model's parameters are drawn, beyond PyTorch's defaults.
struct InitOptions {
  // The output map's (output_logit_map) weight and bias are PyTorch's draw times this. 1 is the
  // reference implementation's initialisation. Training jobs use kTrainingReadoutScale: with the
  // default draw, the residual stream of a post-LN model (about √layers in size) through a full-size
  // output map gives logits far from uniform (a first loss above ln vocab), and AdamW's first steps
  // — sign steps of the learning rate on every weight, the same direction for every token — shift
  // every logit together, which wide, deep post-LN models turn into a loss spike
  // (docs/DESIGN.md, "Training defaults"). REQUIRES: finite, > 0.
  double readout_scale = 1.0;
};

// The readout scale of fresh models in training jobs (JobSpec.model.init_readout_scale's default).
inline constexpr double kTrainingReadoutScale = 0.1;

class PerformerModel {
 public:
  // A freshly initialised model, as PyTorch initialises the reference's modules (Linear: uniform
  // ±1/sqrt(fan_in); Embedding: N(0, 1); LayerNorm: ones and zeros), from `seed`, with the output
  // map scaled by init.readout_scale. INVALID_ARGUMENT for a bad config or readout scale.
  static absl::StatusOr<PerformerModel> Create(const ModelConfig& config, DType dtype,
                                               const at::Device& device, uint64_t seed,
                                               const InitOptions& init = {});

  // A model from named tensors (a checkpoint). Every parameter must be present with its exact
  // shape; extra names are an error unless they start with one of `ignored_prefixes`. Tensors of
  // another floating dtype are converted to `dtype`. INVALID_ARGUMENT names the tensor.
  static absl::StatusOr<PerformerModel> FromTensors(const ModelConfig& config,
                                                    const std::map<std::string, at::Tensor>& tensors,
                                                    DType dtype, const at::Device& device,
                                                    const std::vector<std::string>& ignored_prefixes = {});
  // The same, taking the tensors instead of copying them: a tensor already of `dtype`, on `device`,
  // contiguous and covering its whole storage becomes the parameter as it is (no copy, no second
  // copy of the model in memory while it is built); any other is copied as FromTensors does. For
  // tensors the caller has just made (read from a file, received, computed) and will not write to
  // again: whoever else holds them (e.g. the model a partial fetch was rebuilt from) shares memory
  // with the model — which is safe because a model's parameters are never written in place.
  static absl::StatusOr<PerformerModel> FromOwnedTensors(
      const ModelConfig& config, std::map<std::string, at::Tensor> tensors, DType dtype,
      const at::Device& device, const std::vector<std::string>& ignored_prefixes = {});

  const ModelConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  const at::Device& device() const { return device_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  int64_t parameter_bytes() const;

  // Named copies-free view of the parameters.
  std::map<std::string, at::Tensor> StateDict() const;

 private:
  PerformerModel(ModelConfig config, DType dtype, at::Device device, std::vector<at::Tensor> parameters);

  ModelConfig config_;
  DType dtype_;
  at::Device device_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> parameters_;
};

// FAVOR+ projections, one [heads, head_dim, M] tensor per layer: orthogonal head_dim×head_dim
// blocks (QR of a Gaussian, sign-fixed) times sqrt(head_dim), drawn from `seed` on the CPU in
// float64 so every device and dtype sees the same features. Empty for deterministic feature maps.
std::vector<at::Tensor> SampleFavorProjections(const ModelConfig& config, uint64_t seed,
                                               const at::TensorOptions& options);

// ---- Row-wise pieces of the forward pass; each works on a stretch of S rows. ----

inline constexpr double kLayerNormEps = 1e-5;
inline constexpr double kDenominatorEps = 1e-16;  // as the reference: num / (den + 1e-16)

// The input gradient of a linear map whose weight, in compute layout [in, out], is split along its
// output columns into `pieces` (one piece, or q | k | v): dx = Σ g[:, piece's columns]·pieceᵀ.
// Each pieceᵀ is then the parameter's own [out, in] storage, the layout the product wants.
// `products` as LayerWeights::products.
at::Tensor LinearInputGradient(const at::Tensor& g, const std::vector<at::Tensor>& pieces,
                               at::ScalarType products = at::ScalarType::Undefined);

// x0 for tokens [S] (int64) at document positions [S] (int64): [S, d_model].
at::Tensor EmbedTokens(const ModelConfig& config, const ModelWeights& weights, const at::Tensor& tokens,
                       const at::Tensor& positions);

// F: what goes into the prefix sum (φk, v) and what skips it (φq and the residual input x).
struct AttentionInputs {
  at::Tensor phi_q;     // [k, S, M]
  at::Tensor phi_k;     // [k, S, M]
  at::Tensor v;         // [k, S, d]
  at::Tensor residual;  // [S, d_model], the layer's input
};
AttentionInputs LayerF(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& x,
                       const at::Tensor& favor_projection);

// G: attention output from the prefix-sum results, residual adds and the feed-forward block.
at::Tensor LayerG(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& numerator,
                  const at::Tensor& denominator, const at::Tensor& residual);

// Σ cross-entropy of rows `target_rows` of the logits of x [S, d_model] against `targets`
// (both int64 [P]); a zero scalar when P = 0.
at::Tensor CrossEntropySum(const ModelWeights& weights, const at::Tensor& x, const at::Tensor& target_rows,
                           const at::Tensor& targets);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PERFORMER_MODEL_H_
