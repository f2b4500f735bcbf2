#include "performer/performer_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "performer/matrix_products.h"

namespace slimfit::performer {
namespace {

constexpr int kLayerParameterCount = 14;

// y = x · W + b whose backward adds xᵀ·g and Σg into the sink tensors in place and returns no
// gradient for W and b (their .grad stays untouched). W and b still enter as inputs so the node
// is part of the graph whenever they require grad.
// A linear map whose backward adds the weight and bias gradients into the sink tensors in place
// (LayerWeights::gradient_sink) and returns only the input's gradient.
class LinearIntoSink : public torch::autograd::Function<LinearIntoSink> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& forward_t, const at::Tensor& bias,
                            const at::Tensor& sink_weight_t, const at::Tensor& sink_bias,
                            const std::vector<at::Tensor>& pieces, at::ScalarType products) {
    ctx->save_for_backward({x});
    ctx->saved_data["pieces"] = pieces;
    ctx->saved_data["sink_weight_t"] = sink_weight_t;
    ctx->saved_data["sink_bias"] = sink_bias;
    ctx->saved_data["products"] = static_cast<int64_t>(products);
    return AddBiasProductIn(products, bias, x, forward_t);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor& g = grads[0];
    at::Tensor sink_weight_t = ctx->saved_data["sink_weight_t"].toTensor();
    at::Tensor sink_bias = ctx->saved_data["sink_bias"].toTensor();
    const auto products = static_cast<at::ScalarType>(ctx->saved_data["products"].toInt());
    AccumulateProductIn(products, sink_weight_t, x.t(), g);
    sink_bias.add_(g.sum(0));
    const at::Tensor grad_x =
        x.requires_grad() ? LinearInputGradient(g, ctx->saved_data["pieces"].toTensorVector(), products)
                          : at::Tensor();
    return {grad_x, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Embedding lookup whose backward adds the rows' gradients into the sink in place.
class EmbeddingIntoSink : public torch::autograd::Function<EmbeddingIntoSink> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& weight,
                            const at::Tensor& tokens, const at::Tensor& sink) {
    ctx->save_for_backward({tokens});
    ctx->saved_data["sink"] = sink;
    return at::embedding(weight, tokens);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor sink = ctx->saved_data["sink"].toTensor();
    sink.index_add_(0, ctx->get_saved_variables()[0], grads[0]);
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// x·w + b. `forward_t` is the weight for the product (a contiguous copy, or `pieces[0]` itself);
// `pieces` the weight in compute layout split along its output columns, for the input gradient.
// Without a sink, LibTorch's autograd (when recording) sees an ordinary product.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& forward_t, const at::Tensor& bias,
                  const std::vector<at::Tensor>& pieces, const at::Tensor* sink_weight_t,
                  const at::Tensor* sink_bias, at::ScalarType products) {
  if (sink_weight_t == nullptr) return AddBiasProductIn(products, bias, x, forward_t);
  return LinearIntoSink::apply(x, forward_t, bias, *sink_weight_t, *sink_bias, pieces, products);
}

std::string ShapeString(at::IntArrayRef shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

}  // namespace

at::ScalarType ToScalarType(DType dtype) { return dtype == DType::kFloat32 ? at::kFloat : at::kDouble; }

namespace {

// PrepareForwardLayouts for reduced-precision products: each copy written in one pass (copy_
// rounds and lays out at once), q | k | v straight into their fused copy.
void RoundProductWeights(ModelWeights* weights, at::ScalarType products) {
  const at::TensorOptions options = weights->embedding.options().dtype(products);
  auto round = [&options](const at::Tensor& weight_t) {
    return at::empty(weight_t.sizes(), options).copy_(weight_t);
  };
  weights->products = products;
  for (LayerWeights& w : weights->layers) {
    w.products = products;
    const int64_t d = w.q_weight_t.size(1);
    w.qkv_weight_t = at::empty({w.q_weight_t.size(0), 3 * d}, options);
    w.qkv_weight_t.narrow(1, 0, d).copy_(w.q_weight_t);
    w.qkv_weight_t.narrow(1, d, d).copy_(w.k_weight_t);
    w.qkv_weight_t.narrow(1, 2 * d, d).copy_(w.v_weight_t);
    w.qkv_bias = at::cat({w.q_bias, w.k_bias, w.v_bias}, 0);
    w.qkv_gradient_pieces = {w.qkv_weight_t};
    w.ffn_in_weight_t = round(w.ffn_in_weight_t);
    w.ffn_out_weight_t = round(w.ffn_out_weight_t);
  }
  weights->output_weight_t = round(weights->output_weight_t);
}

}  // namespace

at::Tensor LinearInputGradient(const at::Tensor& g, const std::vector<at::Tensor>& pieces,
                               at::ScalarType products) {
  at::Tensor grad_x;
  int64_t column = 0;
  for (const at::Tensor& piece : pieces) {
    const at::Tensor part = g.narrow(1, column, piece.size(1));
    if (grad_x.defined()) {
      AccumulateProductIn(products, grad_x, part, piece.t());
    } else {
      grad_x = AddBiasProductIn(products, at::Tensor(), part, piece.t());
    }
    column += piece.size(1);
  }
  return grad_x;
}

std::vector<std::string> ParameterNames(const ModelConfig& config) {
  std::vector<std::string> names = {"input_map.weight"};
  for (int64_t r = 0; r < config.layers; ++r) {
    const std::string p = absl::StrCat("layers.", r, ".");
    for (const char* name :
         {"attention.q_map.weight", "attention.q_map.bias", "attention.k_map.weight", "attention.k_map.bias",
          "attention.v_map.weight", "attention.v_map.bias", "U_map.weight", "U_map.bias", "V_map.weight",
          "V_map.bias", "layernorm1.weight", "layernorm1.bias", "layernorm2.weight", "layernorm2.bias"}) {
      names.push_back(p + name);
    }
  }
  names.push_back("output_logit_map.weight");
  names.push_back("output_logit_map.bias");
  return names;
}

std::vector<std::vector<int64_t>> ParameterShapes(const ModelConfig& config) {
  const int64_t d = config.d_model;
  const int64_t f = config.d_ff;
  std::vector<std::vector<int64_t>> shapes = {{config.vocab, d / 2}};
  for (int64_t r = 0; r < config.layers; ++r) {
    for (int i = 0; i < 3; ++i) {
      shapes.push_back({d, d});
      shapes.push_back({d});
    }
    shapes.insert(shapes.end(), {{f, d}, {f}, {d, f}, {d}, {d}, {d}, {d}, {d}});
  }
  shapes.push_back({config.vocab, d});
  shapes.push_back({config.vocab});
  return shapes;
}

size_t FirstAttentionParameter(int64_t layer) {
  return 1 + static_cast<size_t>(layer) * kLayerParameterCount;
}

const at::Tensor& ForwardOperand(const at::Tensor& copy, const at::Tensor& weight_t) {
  return copy.defined() ? copy : weight_t;
}

bool CopiesForwardLayouts(const at::Device& device, DType dtype) {
  return device.is_cpu() && dtype == DType::kFloat32 && OneDnnProducts();
}

void PrepareForwardLayouts(ModelWeights* weights, bool copy_all, at::ScalarType products) {
  at::NoGradGuard no_grad;
  if (products != at::ScalarType::Undefined && products != weights->embedding.scalar_type()) {
    RoundProductWeights(weights, products);
    return;
  }
  for (LayerWeights& w : weights->layers) {
    w.qkv_weight_t = at::cat({w.q_weight_t, w.k_weight_t, w.v_weight_t}, 1);
    w.qkv_bias = at::cat({w.q_bias, w.k_bias, w.v_bias}, 0);
    const bool onednn =
        CopiesForwardLayouts(w.qkv_weight_t.device(),
                             w.qkv_weight_t.scalar_type() == at::kFloat ? DType::kFloat32 : DType::kFloat64);
    w.qkv_gradient_pieces = onednn ? std::vector<at::Tensor>{w.q_weight_t, w.k_weight_t, w.v_weight_t}
                                   : std::vector<at::Tensor>{w.qkv_weight_t};
    if (copy_all) {
      w.ffn_in_forward_t = w.ffn_in_weight_t.contiguous();
      w.ffn_out_forward_t = w.ffn_out_weight_t.contiguous();
    }
  }
  if (copy_all) weights->output_forward_t = weights->output_weight_t.contiguous();
}

bool IsLinearWeight(const std::string& name) {
  return absl::EndsWith(name, ".weight") && !absl::StrContains(name, "layernorm") &&
         name != "input_map.weight";
}

std::vector<at::Tensor> ToComputeLayout(const std::vector<std::string>& names,
                                        const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> layout;
  for (size_t i = 0; i < parameters.size(); ++i) {
    layout.push_back(IsLinearWeight(names[i]) ? parameters[i].t() : parameters[i]);
  }
  return layout;
}

ModelWeights BindWeights(const ModelConfig& config, const std::vector<at::Tensor>& p) {
  ModelWeights weights;
  weights.embedding = p[0];
  for (int64_t r = 0; r < config.layers; ++r) {
    const size_t o = FirstAttentionParameter(r);
    weights.layers.push_back(LayerWeights{p[o], p[o + 1], p[o + 2], p[o + 3], p[o + 4], p[o + 5], p[o + 6],
                                          p[o + 7], p[o + 8], p[o + 9], p[o + 10], p[o + 11], p[o + 12],
                                          p[o + 13]});
  }
  weights.output_weight_t = p[p.size() - 2];
  const int64_t half = config.d_model / 2;
  const auto options = p[0].options().requires_grad(false);
  weights.position_frequencies =
      at::exp(at::arange(0, half, 2, options) * (-std::log(10000.0) / static_cast<double>(half)));
  weights.output_bias = p[p.size() - 1];
  return weights;
}

PerformerModel::PerformerModel(ModelConfig config, DType dtype, at::Device device,
                               std::vector<at::Tensor> parameters)
    : config_(std::move(config)),
      dtype_(dtype),
      device_(device),
      names_(ParameterNames(config_)),
      parameters_(std::move(parameters)) {}

absl::StatusOr<PerformerModel> PerformerModel::Create(const ModelConfig& config, DType dtype,
                                                      const at::Device& device, uint64_t seed,
                                                      const InitOptions& init) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  if (!(init.readout_scale > 0) || !std::isfinite(init.readout_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("readout scale must be finite and > 0, got ", init.readout_scale));
  }
  try {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto cpu64 = at::TensorOptions().dtype(at::kDouble);
    const auto target = at::TensorOptions().dtype(ToScalarType(dtype)).device(device);
    const std::vector<std::string> names = ParameterNames(config);
    const std::vector<std::vector<int64_t>> shapes = ParameterShapes(config);
    std::vector<at::Tensor> parameters;
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& name = names[i];
      at::Tensor t;
      if (name == "input_map.weight") {
        t = at::normal(0.0, 1.0, shapes[i], generator, cpu64);
      } else if (absl::StrContains(name, "layernorm")) {
        t = absl::EndsWith(name, ".weight") ? at::ones(shapes[i], cpu64) : at::zeros(shapes[i], cpu64);
      } else {
        // Linear layers: weight [out, in] and bias [out] both uniform in ±1/sqrt(in).
        const std::vector<int64_t>& weight_shape =
            absl::EndsWith(name, ".weight") ? shapes[i] : shapes[i - 1];
        const double bound = 1.0 / std::sqrt(static_cast<double>(weight_shape[1]));
        t = at::empty(shapes[i], cpu64).uniform_(-bound, bound, generator);
        if (absl::StartsWith(name, "output_logit_map.")) t.mul_(init.readout_scale);
      }
      parameters.push_back(t.to(target));
    }
    return PerformerModel(config, dtype, device, std::move(parameters));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("initialising the model failed: ", e.what_without_backtrace()));
  }
}

namespace {

// The parameters of `config` from named tensors, checked (FromTensors' contract); `take`: tensors
// that already fit are used as they are (FromOwnedTensors).
absl::StatusOr<std::vector<at::Tensor>> ParametersFromTensors(
    const ModelConfig& config, const std::map<std::string, at::Tensor>& tensors, DType dtype,
    const at::Device& device, const std::vector<std::string>& ignored_prefixes, bool take) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  const std::vector<std::string> names = ParameterNames(config);
  const std::vector<std::vector<int64_t>> shapes = ParameterShapes(config);
  std::vector<at::Tensor> parameters;
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = tensors.find(names[i]);
    if (it == tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint has no tensor '", names[i],
                                                     "' (expected shape ", ShapeString(shapes[i]),
                                                     ") for a model with ", config.DebugString()));
    }
    const at::Tensor& t = it->second;
    if (t.sizes() != at::IntArrayRef(shapes[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint tensor '", names[i], "' has shape ", ShapeString(t.sizes()),
                       " but a model with ", config.DebugString(), " needs ", ShapeString(shapes[i])));
    }
    if (!at::isFloatingType(t.scalar_type())) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint tensor '", names[i], "' has dtype ",
                                                     c10::toString(t.scalar_type()),
                                                     "; parameters must be floating point"));
    }
    try {
      const bool as_it_is = take && t.scalar_type() == ToScalarType(dtype) && t.device() == device &&
                            t.is_contiguous() && t.storage_offset() == 0 &&
                            t.storage().nbytes() == static_cast<size_t>(t.numel() * t.element_size());
      parameters.push_back(as_it_is ? t.detach()
                                    : t.to(at::TensorOptions().dtype(ToScalarType(dtype)).device(device),
                                           /*non_blocking=*/false, /*copy=*/true));
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(absl::StrCat("cannot move checkpoint tensor '", names[i], "' to ",
                                                     device.str(), ": ", e.what_without_backtrace()));
    }
  }
  for (const auto& [name, tensor] : tensors) {
    (void)tensor;
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    bool ignored = false;
    for (const std::string& prefix : ignored_prefixes) ignored = ignored || absl::StartsWith(name, prefix);
    if (!ignored) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint tensor '", name, "' is not a parameter of a model with ",
                       config.DebugString(), " (a checkpoint of another architecture or depth?)"));
    }
  }
  return parameters;
}

}  // namespace

absl::StatusOr<PerformerModel> PerformerModel::FromTensors(const ModelConfig& config,
                                                           const std::map<std::string, at::Tensor>& tensors,
                                                           DType dtype, const at::Device& device,
                                                           const std::vector<std::string>& ignored_prefixes) {
  absl::StatusOr<std::vector<at::Tensor>> parameters =
      ParametersFromTensors(config, tensors, dtype, device, ignored_prefixes, /*take=*/false);
  if (!parameters.ok()) return parameters.status();
  return PerformerModel(config, dtype, device, *std::move(parameters));
}

absl::StatusOr<PerformerModel> PerformerModel::FromOwnedTensors(
    const ModelConfig& config, std::map<std::string, at::Tensor> tensors, DType dtype,
    const at::Device& device, const std::vector<std::string>& ignored_prefixes) {
  absl::StatusOr<std::vector<at::Tensor>> parameters =
      ParametersFromTensors(config, tensors, dtype, device, ignored_prefixes, /*take=*/true);
  tensors.clear();  // what was not taken goes now
  if (!parameters.ok()) return parameters.status();
  return PerformerModel(config, dtype, device, *std::move(parameters));
}

int64_t PerformerModel::parameter_bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& p : parameters_) bytes += p.numel() * p.element_size();
  return bytes;
}

std::map<std::string, at::Tensor> PerformerModel::StateDict() const {
  std::map<std::string, at::Tensor> state;
  for (size_t i = 0; i < names_.size(); ++i) state.emplace(names_[i], parameters_[i]);
  return state;
}

std::vector<at::Tensor> SampleFavorProjections(const ModelConfig& config, uint64_t seed,
                                               const at::TensorOptions& options) {
  std::vector<at::Tensor> projections;
  if (config.feature_map != FeatureMap::kFavor) return projections;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t d = config.head_dim();
  const auto cpu64 = at::TensorOptions().dtype(at::kDouble);
  for (int64_t r = 0; r < config.layers; ++r) {
    std::vector<at::Tensor> heads;
    for (int64_t h = 0; h < config.heads; ++h) {
      std::vector<at::Tensor> blocks;
      for (int64_t b = 0; b < config.feature_multiplier; ++b) {
        const at::Tensor gaussian = at::normal(0.0, 1.0, {d, d}, generator, cpu64);
        auto [q, r_factor] = at::linalg_qr(gaussian);
        blocks.push_back(q * at::sign(r_factor.diagonal()).unsqueeze(0));
      }
      heads.push_back(at::cat(blocks, 1));
    }
    projections.push_back((at::stack(heads, 0) * std::sqrt(static_cast<double>(d))).to(options));
  }
  return projections;
}

at::Tensor EmbedTokens(const ModelConfig& config, const ModelWeights& weights, const at::Tensor& tokens,
                       const at::Tensor& positions) {
  const auto options = weights.embedding.options().requires_grad(false);
  const at::Tensor angles = positions.to(options).unsqueeze(1) * weights.position_frequencies.unsqueeze(0);
  const at::Tensor embedded =
      weights.gradient_sink == nullptr
          ? at::embedding(weights.embedding, tokens)
          : EmbeddingIntoSink::apply(weights.embedding, tokens, weights.gradient_sink->embedding);
  return at::cat({embedded, at::sin(angles), at::cos(angles)}, 1);
}

namespace {

at::Tensor SplitHeads(const at::Tensor& x, int64_t heads) {
  return x.unflatten(1, {heads, x.size(1) / heads}).transpose(0, 1);  // [k, S, d]
}

at::Tensor Features(const ModelConfig& config, const at::Tensor& x, const at::Tensor& projection) {
  switch (config.feature_map) {
    case FeatureMap::kRelu:
      return at::relu(x).contiguous();
    case FeatureMap::kElu1:
      return (at::elu(x) + 1).contiguous();
    case FeatureMap::kSqr:
      return (x * x).contiguous();
    case FeatureMap::kFavor: {
      const at::Tensor scaled = x * std::pow(static_cast<double>(config.head_dim()), -0.25);
      return at::exp(at::matmul(scaled, projection) - 0.5 * (scaled * scaled).sum(2, true));
    }
  }
  return x;
}

}  // namespace

AttentionInputs LayerF(const ModelConfig& config, const LayerWeights& w, const at::Tensor& x,
                       const at::Tensor& favor_projection) {
  const at::Tensor h = config.layernorm == LayerNormPlacement::kPre
                           ? at::layer_norm(x, {config.d_model}, w.norm1_weight, w.norm1_bias, kLayerNormEps)
                           : x;
  AttentionInputs inputs;
  const LayerWeights* sink = w.gradient_sink;
  auto linear = [&](const at::Tensor& forward_t, const at::Tensor& bias,
                    const std::vector<at::Tensor>& pieces, const at::Tensor LayerWeights::*sink_weight,
                    const at::Tensor LayerWeights::*sink_bias) {
    return sink == nullptr
               ? Linear(h, forward_t, bias, pieces, nullptr, nullptr, w.products)
               : Linear(h, forward_t, bias, pieces, &(sink->*sink_weight), &(sink->*sink_bias), w.products);
  };
  at::Tensor q, k, v;
  if (w.qkv_weight_t.defined()) {
    const at::Tensor qkv = linear(w.qkv_weight_t, w.qkv_bias, w.qkv_gradient_pieces,
                                  &LayerWeights::qkv_weight_t, &LayerWeights::qkv_bias);
    const int64_t d = config.d_model;
    q = qkv.narrow(1, 0, d);
    k = qkv.narrow(1, d, d);
    v = qkv.narrow(1, 2 * d, d);
  } else {
    q = linear(w.q_weight_t, w.q_bias, {w.q_weight_t}, &LayerWeights::q_weight_t, &LayerWeights::q_bias);
    k = linear(w.k_weight_t, w.k_bias, {w.k_weight_t}, &LayerWeights::k_weight_t, &LayerWeights::k_bias);
    v = linear(w.v_weight_t, w.v_bias, {w.v_weight_t}, &LayerWeights::v_weight_t, &LayerWeights::v_bias);
  }
  inputs.phi_q = Features(config, SplitHeads(q, config.heads), favor_projection);
  inputs.phi_k = Features(config, SplitHeads(k, config.heads), favor_projection);
  inputs.v = SplitHeads(v, config.heads).contiguous();
  inputs.residual = x;
  return inputs;
}

at::Tensor LayerG(const ModelConfig& config, const LayerWeights& w, const at::Tensor& numerator,
                  const at::Tensor& denominator, const at::Tensor& residual) {
  const int64_t rows = residual.size(0);
  at::Tensor attention = (numerator / (denominator.unsqueeze(2) + kDenominatorEps))
                             .transpose(0, 1)
                             .reshape({rows, config.d_model});
  const bool post = config.layernorm == LayerNormPlacement::kPost;
  if (post)
    attention = at::layer_norm(attention, {config.d_model}, w.norm1_weight, w.norm1_bias, kLayerNormEps);
  const at::Tensor x = residual + attention;
  const at::Tensor ffn_input =
      post ? x : at::layer_norm(x, {config.d_model}, w.norm2_weight, w.norm2_bias, kLayerNormEps);
  const LayerWeights* sink = w.gradient_sink;
  const at::Tensor hidden = at::gelu(Linear(
      ffn_input, ForwardOperand(w.ffn_in_forward_t, w.ffn_in_weight_t), w.ffn_in_bias, {w.ffn_in_weight_t},
      sink ? &sink->ffn_in_weight_t : nullptr, sink ? &sink->ffn_in_bias : nullptr, w.products));
  at::Tensor ffn = Linear(hidden, ForwardOperand(w.ffn_out_forward_t, w.ffn_out_weight_t), w.ffn_out_bias,
                          {w.ffn_out_weight_t}, sink ? &sink->ffn_out_weight_t : nullptr,
                          sink ? &sink->ffn_out_bias : nullptr, w.products);
  if (post) ffn = at::layer_norm(ffn, {config.d_model}, w.norm2_weight, w.norm2_bias, kLayerNormEps);
  return x + ffn;
}

at::Tensor CrossEntropySum(const ModelWeights& weights, const at::Tensor& x, const at::Tensor& target_rows,
                           const at::Tensor& targets) {
  if (target_rows.numel() == 0) return at::zeros({}, x.options());
  const ModelWeights* sink = weights.gradient_sink;
  const at::Tensor logits = Linear(
      x.index_select(0, target_rows), ForwardOperand(weights.output_forward_t, weights.output_weight_t),
      weights.output_bias, {weights.output_weight_t}, sink ? &sink->output_weight_t : nullptr,
      sink ? &sink->output_bias : nullptr, weights.products);
  return at::nll_loss(at::log_softmax(logits, 1), targets, {}, at::Reduction::Sum);
}

}  // namespace slimfit::performer
