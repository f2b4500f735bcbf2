#include "performer/performer_model.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace slimfit::performer {
namespace {

ModelConfig Small() {
  ModelConfig config;
  config.vocab = 40;
  config.d_model = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 32;
  return config;
}

TEST(PerformerModelTest, CreateIsDeterministicAndFollowsPyTorchDefaults) {
  absl::StatusOr<PerformerModel> a = PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 5);
  absl::StatusOr<PerformerModel> b = PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 5);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->names(), ParameterNames(Small()));
  for (size_t i = 0; i < a->names().size(); ++i) {
    const std::string& name = a->names()[i];
    const at::Tensor& p = a->parameters()[i];
    EXPECT_TRUE(at::equal(p, b->parameters()[i])) << name;
    EXPECT_EQ(p.sizes().vec(), ParameterShapes(Small())[i]) << name;
    if (name.find("layernorm") != std::string::npos) {
      EXPECT_EQ(p.sum().item<double>(), name.find(".weight") != std::string::npos ? p.numel() : 0.0) << name;
      continue;
    }
    if (name == "input_map.weight") continue;  // N(0, 1)
    // Linear maps: weight [out, in] and bias [out], both uniform in ±1/sqrt(in).
    const bool is_weight = name.size() > 7 && name.substr(name.size() - 7) == ".weight";
    const at::Tensor& weight = is_weight ? p : a->parameters()[i - 1];
    const double bound = 1.0 / std::sqrt(static_cast<double>(weight.size(1)));
    EXPECT_LE(p.abs().max().item<double>(), bound + 1e-7) << name;
    EXPECT_GE(p.abs().max().item<double>(), 0.5 * bound) << name;
  }
}

TEST(PerformerModelTest, ReadoutScaleScalesOnlyTheOutputMap) {
  absl::StatusOr<PerformerModel> plain = PerformerModel::Create(Small(), DType::kFloat64, at::kCPU, 9);
  InitOptions init;
  init.readout_scale = kTrainingReadoutScale;
  absl::StatusOr<PerformerModel> scaled = PerformerModel::Create(Small(), DType::kFloat64, at::kCPU, 9, init);
  ASSERT_TRUE(plain.ok() && scaled.ok());
  int scaled_tensors = 0;
  for (size_t i = 0; i < plain->names().size(); ++i) {
    const std::string& name = plain->names()[i];
    if (name.rfind("output_logit_map.", 0) == 0) {
      EXPECT_TRUE(at::allclose(scaled->parameters()[i], plain->parameters()[i] * 0.1)) << name;
      ++scaled_tensors;
    } else {
      EXPECT_TRUE(at::equal(scaled->parameters()[i], plain->parameters()[i])) << name;
    }
  }
  EXPECT_EQ(scaled_tensors, 2);
  for (double bad : {0.0, -1.0, std::nan("")}) {
    init.readout_scale = bad;
    EXPECT_EQ(PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 9, init).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// Every linear map honours LayerWeights / ModelWeights::products in its forward and its backward
// (weight and input gradients), with the weights rounded once (PrepareForwardLayouts) — the q|k|v map
// (LayerF), the FFN's two maps (LayerG), the output map (CrossEntropySum) — against a replica written with
// explicit bfloat16 casts of the float32 weights. A map left in float32 differs from the replica by
// bfloat16's rounding (~1e-3), far above the tolerance.
TEST(PerformerModelTest, Bf16ProductsRoundEveryLinearMapForwardAndBackward) {
  ModelConfig config;
  config.vocab = 11;
  config.d_model = 8;
  config.layers = 1;
  config.heads = 2;
  config.d_ff = 12;
  config.feature_map = FeatureMap::kRelu;
  config.layernorm = LayerNormPlacement::kPre;
  absl::StatusOr<PerformerModel> model = PerformerModel::Create(config, DType::kFloat32, at::kCPU, 3);
  ASSERT_TRUE(model.ok()) << model.status();
  ModelWeights weights = BindWeights(config, ToComputeLayout(model->names(), model->parameters()));
  ModelWeights unrounded = weights;  // the float32 weights the replica rounds itself
  PrepareForwardLayouts(&unrounded, /*copy_all=*/false);
  PrepareForwardLayouts(&weights, /*copy_all=*/false, at::kBFloat16);
  std::vector<at::Tensor> zeros;
  for (const at::Tensor& p : ToComputeLayout(model->names(), model->parameters()))
    zeros.push_back(at::zeros(p.sizes()));
  ModelWeights sink = BindWeights(config, zeros);
  sink.layers[0].qkv_weight_t = at::zeros({8, 24});
  sink.layers[0].qkv_bias = at::zeros({24});
  weights.gradient_sink = &sink;
  weights.layers[0].gradient_sink = &sink.layers[0];
  const LayerWeights& w = weights.layers[0];
  auto bf = [](const at::Tensor& t) { return t.detach().to(at::kBFloat16); };
  // The float32 weights rounded, in the layout the engine's copies have ([in, out], contiguous: a
  // bfloat16 product's own sums, and so its rounding, follow its operands' layout).
  auto weight16 = [&](const at::Tensor& weight_t) { return bf(weight_t).contiguous(); };
  const LayerWeights& f = unrounded.layers[0];
  auto linear16 = [&](const at::Tensor& x, const at::Tensor& wt, const at::Tensor& b) {
    return at::addmm(bf(b), bf(x), bf(wt)).to(at::kFloat);
  };
  auto weight_gradient16 = [&](const at::Tensor& x, const at::Tensor& g) {
    return at::mm(bf(x.t()), bf(g)).to(at::kFloat);
  };
  auto close = [](const at::Tensor& got, const at::Tensor& want) {
    return at::allclose(got, want, 1e-5, 1e-6 * want.abs().max().item<double>());
  };
  at::manual_seed(4);

  // Each linear weight rounded once, into a contiguous bfloat16 copy the products take as it is.
  for (const auto& [copy, original] :
       {std::pair{w.qkv_weight_t, f.qkv_weight_t}, std::pair{w.ffn_in_weight_t, f.ffn_in_weight_t},
        std::pair{w.ffn_out_weight_t, f.ffn_out_weight_t},
        std::pair{weights.output_weight_t, unrounded.output_weight_t}}) {
    EXPECT_EQ(copy.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(copy.is_contiguous());
    EXPECT_TRUE(at::equal(copy, bf(original)));
  }
  ASSERT_EQ(w.qkv_gradient_pieces.size(), 1u);
  EXPECT_TRUE(w.qkv_gradient_pieces[0].is_same(w.qkv_weight_t));

  // q|k|v: v (no feature map on it) forwards; backwards the fused weight's gradient and the input
  // gradient through the rounded weight (the replica's through autograd's own bfloat16 product).
  const at::Tensor x = at::randn({5, 8}).requires_grad_();
  const AttentionInputs in = LayerF(config, w, x, at::Tensor());
  const at::Tensor h = at::layer_norm(x.detach(), {8}, w.norm1_weight, w.norm1_bias, kLayerNormEps);
  const at::Tensor qkv = linear16(h, weight16(f.qkv_weight_t), w.qkv_bias);
  EXPECT_TRUE(close(in.v, qkv.narrow(1, 16, 8).reshape({5, 2, 4}).transpose(0, 1)));
  const at::Tensor weight_v = at::randn({2, 5, 4});
  (in.v * weight_v).sum().backward();
  const at::Tensor g_qkv = at::cat({at::zeros({5, 16}), weight_v.transpose(0, 1).reshape({5, 8})}, 1);
  EXPECT_TRUE(close(sink.layers[0].qkv_weight_t, weight_gradient16(h, g_qkv)));
  const at::Tensor x_replica = x.detach().clone().requires_grad_();
  const at::Tensor h_replica = at::layer_norm(x_replica, {8}, w.norm1_weight, w.norm1_bias, kLayerNormEps);
  const at::Tensor v_replica =
      at::addmm(bf(w.qkv_bias), h_replica.to(at::kBFloat16), weight16(f.qkv_weight_t))
          .to(at::kFloat)
          .narrow(1, 16, 8)
          .reshape({5, 2, 4})
          .transpose(0, 1);
  (v_replica * weight_v).sum().backward();
  EXPECT_TRUE(close(x.grad(), x_replica.grad()));

  // The FFN: both maps forwards; backwards the output map's weight gradient, the input gradient
  // it passes down (through GELU) and the input map's weight gradient.
  const at::Tensor numerator = at::randn({2, 5, 4}), denominator = at::rand({2, 5}) + 1;
  const at::Tensor residual = at::randn({5, 8}).requires_grad_();
  const at::Tensor out = LayerG(config, w, numerator, denominator, residual);
  const at::Tensor x1 =
      residual.detach() +
      (numerator / (denominator.unsqueeze(2) + kDenominatorEps)).transpose(0, 1).reshape({5, 8});
  const at::Tensor ffn_input = at::layer_norm(x1, {8}, w.norm2_weight, w.norm2_bias, kLayerNormEps);
  const at::Tensor pre = linear16(ffn_input, weight16(f.ffn_in_weight_t), w.ffn_in_bias);
  const at::Tensor hidden = at::gelu(pre);
  EXPECT_TRUE(close(out, x1 + linear16(hidden, weight16(f.ffn_out_weight_t), w.ffn_out_bias)));
  const at::Tensor weight_out = at::randn({5, 8});
  (out * weight_out).sum().backward();
  EXPECT_TRUE(close(sink.layers[0].ffn_out_weight_t, weight_gradient16(hidden, weight_out)));
  const at::Tensor g_hidden = at::mm(bf(weight_out), weight16(f.ffn_out_weight_t).t()).to(at::kFloat);
  EXPECT_TRUE(
      close(sink.layers[0].ffn_in_weight_t, weight_gradient16(ffn_input, at::gelu_backward(g_hidden, pre))));

  // The output map: the loss forwards, its weight gradient backwards.
  const at::Tensor top = at::randn({5, 8}).requires_grad_();
  const at::Tensor rows = at::arange(1, 5, at::kLong), targets = at::randint(11, {4}, at::kLong);
  const at::Tensor loss = CrossEntropySum(weights, top, rows, targets);
  const at::Tensor logits =
      linear16(top.detach().index_select(0, rows), weight16(unrounded.output_weight_t), weights.output_bias)
          .requires_grad_();
  const at::Tensor want_loss = at::nll_loss(at::log_softmax(logits, 1), targets, {}, at::Reduction::Sum);
  EXPECT_NEAR(loss.item<double>(), want_loss.item<double>(), 1e-5 * want_loss.item<double>());
  loss.backward();
  want_loss.backward();
  EXPECT_TRUE(
      close(sink.output_weight_t, weight_gradient16(top.detach().index_select(0, rows), logits.grad())));
  const at::Tensor g_rows = at::mm(bf(logits.grad()), weight16(unrounded.output_weight_t).t()).to(at::kFloat);
  EXPECT_TRUE(close(top.grad(), at::zeros({5, 8}).index_add_(0, rows, g_rows)));
}

// FromOwnedTensors takes tensors that already fit (dtype, device, contiguous, alone in their
// storage) as they are and copies the rest, as FromTensors copies everything; both give the same
// values and the same errors.
TEST(PerformerModelTest, FromOwnedTensorsTakesWhatFitsAndCopiesTheRest) {
  absl::StatusOr<PerformerModel> source = PerformerModel::Create(Small(), DType::kFloat32, at::kCPU, 4);
  ASSERT_TRUE(source.ok()) << source.status();
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, tensor] : source->StateDict()) tensors[name] = tensor.clone();
  const std::string fits = "input_map.weight", as_double = "layers.0.attention.q_map.weight",
                    strided = "layers.0.attention.k_map.weight",
                    shares_storage = "layers.0.attention.k_map.bias";
  tensors[as_double] = tensors[as_double].to(at::kDouble);
  tensors[strided] = tensors[strided].t().contiguous().t();  // the same values, transposed layout
  const at::Tensor wide = at::cat({tensors[shares_storage], tensors[shares_storage]});
  tensors[shares_storage] = wide.slice(0, 0, tensors[shares_storage].size(0));  // half of a larger storage
  const std::string offset = "layers.0.attention.v_map.bias";
  const at::Tensor padded = at::cat({at::zeros({1}), tensors[offset]});
  tensors[offset] = padded.slice(0, 1, padded.size(0));  // the end of a larger storage
  std::map<std::string, const void*> pointers;
  for (const auto& [name, tensor] : tensors) pointers[name] = tensor.data_ptr();

  absl::StatusOr<PerformerModel> copied =
      PerformerModel::FromTensors(Small(), tensors, DType::kFloat32, at::kCPU);
  absl::StatusOr<PerformerModel> taken =
      PerformerModel::FromOwnedTensors(Small(), tensors, DType::kFloat32, at::kCPU);
  ASSERT_TRUE(copied.ok() && taken.ok()) << copied.status() << taken.status();
  const std::map<std::string, at::Tensor> got = taken->StateDict();
  for (const auto& [name, tensor] : source->StateDict()) {
    EXPECT_TRUE(at::equal(got.at(name), tensor)) << name;
    EXPECT_TRUE(at::equal(copied->StateDict().at(name), tensor)) << name;
    EXPECT_NE(copied->StateDict().at(name).data_ptr(), pointers[name]) << name;  // FromTensors always copies
    EXPECT_EQ(got.at(name).scalar_type(), at::kFloat) << name;
  }
  EXPECT_EQ(got.at(fits).data_ptr(), pointers[fits]);
  EXPECT_NE(got.at(as_double).data_ptr(), pointers[as_double]);
  EXPECT_NE(got.at(strided).data_ptr(), pointers[strided]);
  EXPECT_NE(got.at(shares_storage).data_ptr(), pointers[shares_storage]);
  EXPECT_NE(got.at(offset).data_ptr(), pointers[offset]);

  std::map<std::string, at::Tensor> missing = tensors;
  missing.erase(fits);
  const absl::StatusOr<PerformerModel> refused =
      PerformerModel::FromOwnedTensors(Small(), missing, DType::kFloat32, at::kCPU);
  EXPECT_EQ(refused.status(),
            PerformerModel::FromTensors(Small(), missing, DType::kFloat32, at::kCPU).status());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
}

}  // namespace
}  // namespace slimfit::performer
