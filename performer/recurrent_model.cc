#include "performer/recurrent_model.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "performer/matrix_products.h"
#include "performer/plan.h"

namespace slimfit::performer {
namespace {

constexpr int64_t kPrefixBlock = 64;  // the chunked prefix attention's block, as Plan's default

absl::Status CheckStretch(int64_t stretch) {
  if (stretch < 1)
    return absl::InvalidArgumentError(absl::StrCat("stretch must be ≥ 1 token, got ", stretch));
  return absl::OkStatus();
}

absl::Status FromTorchError(const c10::Error& e, const std::string& what) {
  const std::string message = e.what_without_backtrace();
  if (absl::StrContains(message, "can't allocate memory") || absl::StrContains(message, "out of memory")) {
    return absl::ResourceExhaustedError(absl::StrCat("out of memory ", what, ": ", message));
  }
  return absl::InternalError(absl::StrCat(what, " failed: ", message));
}

at::Tensor LongTensor(const std::vector<int64_t>& values, const at::Device& device) {
  return at::from_blob(const_cast<int64_t*>(values.data()), {static_cast<int64_t>(values.size())}, at::kLong)
      .to(device, /*non_blocking=*/false, /*copy=*/true);
}

// The parameters bound for inference (no autograd, forward layouts) and the FAVOR+ projections.
struct Inference {
  ModelWeights weights;
  std::vector<at::Tensor> projections;
};

Inference Bind(const PerformerModel& model, uint64_t feature_seed) {
  Inference bound;
  bound.weights = BindWeights(model.config(), ToComputeLayout(model.names(), model.parameters()));
  PrepareForwardLayouts(&bound.weights, CopiesForwardLayouts(model.device(), model.dtype()));
  const at::TensorOptions options = model.parameters().front().options();
  bound.projections = SampleFavorProjections(model.config(), feature_seed, options);
  return bound;
}

std::vector<Front> ZeroFronts(const ModelConfig& config, const at::TensorOptions& options) {
  return std::vector<Front>(config.layers,
                            ZeroFront(config.heads, config.features_per_head(), config.head_dim(), options));
}

// Every layer over one stretch of rows from the fronts `*fronts` (replaced by the outgoing ones):
// the last layer's output [S, d_model]. `segments` are relative to the stretch.
at::Tensor ForwardStretch(const ModelConfig& config, const Inference& bound, const at::Tensor& tokens,
                          const at::Tensor& positions, const std::vector<Segment>& segments,
                          std::vector<Front>* fronts) {
  at::Tensor x = EmbedTokens(config, bound.weights, tokens, positions);
  for (int64_t r = 0; r < config.layers; ++r) {
    const at::Tensor projection = bound.projections.empty() ? at::Tensor() : bound.projections[r];
    const LayerWeights& w = bound.weights.layers[r];
    const AttentionInputs in = LayerF(config, w, x, projection);
    PrefixAttentionResult prefix = CausalPrefixAttention(in.phi_q, in.phi_k, in.v, (*fronts)[r], segments,
                                                         PrefixMode::kChunked, kPrefixBlock);
    (*fronts)[r] = std::move(prefix.end);
    x = LayerG(config, w, prefix.numerator, prefix.denominator, in.residual);
  }
  return x;
}

}  // namespace

double ScoreResult::bits_per_token() const { return nats_per_token() / std::log(2.0); }

absl::StatusOr<ScoreResult> ScoreTokens(const PerformerModel& model, const PackedBatch& batch,
                                        const ForwardOptions& options) {
  const ModelConfig& config = model.config();
  if (absl::Status s = ValidatePackedBatch(batch, config.vocab); !s.ok()) return s;
  if (absl::Status s = CheckStretch(options.stretch); !s.ok()) return s;
  const absl::Time start = absl::Now();
  ScoreResult result;
  result.predicted_tokens = PredictedTokenCount(batch);
  try {
    at::NoGradGuard no_grad;
    const at::Device device = model.device();
    const Inference bound = Bind(model, options.feature_seed);
    std::vector<Front> fronts = ZeroFronts(config, model.parameters().front().options());
    at::Tensor loss = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
    for (int64_t begin = 0; begin < batch.size(); begin += options.stretch) {
      const int64_t end = std::min(batch.size(), begin + options.stretch);
      StretchLayout layout = LayoutStretch(batch, begin, end);
      for (Segment& segment : layout.segments) {
        segment.begin -= begin;
        segment.end -= begin;
      }
      const at::Tensor tokens =
          LongTensor(std::vector<int64_t>(batch.tokens.begin() + begin, batch.tokens.begin() + end), device);
      const at::Tensor x = ForwardStretch(config, bound, tokens, LongTensor(layout.positions, device),
                                          layout.segments, &fronts);
      if (layout.targets.empty()) continue;
      loss += CrossEntropySum(bound.weights, x, LongTensor(layout.target_rows, device),
                              LongTensor(layout.targets, device))
                  .to(at::kDouble);
    }
    result.loss_sum = loss.item<double>();
  } catch (const c10::Error& e) {
    return FromTorchError(
        e, absl::StrCat("scoring ", batch.size(), " tokens in stretches of ", options.stretch));
  }
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

RecurrentModel::RecurrentModel(const PerformerModel& model, const ForwardOptions& options)
    : model_(model), options_(options) {
  Inference bound = Bind(model_, options_.feature_seed);
  weights_ = std::move(bound.weights);
  projections_ = std::move(bound.projections);
  Reset();
}

absl::StatusOr<RecurrentModel> RecurrentModel::Create(const PerformerModel& model,
                                                      const ForwardOptions& options) {
  if (absl::Status s = CheckStretch(options.stretch); !s.ok()) return s;
  try {
    at::NoGradGuard no_grad;
    return RecurrentModel(model, options);
  } catch (const c10::Error& e) {
    return FromTorchError(e, "preparing the model for generation");
  }
}

void RecurrentModel::Reset() {
  fronts_ = ZeroFronts(model_.config(), model_.parameters().front().options());
  position_ = 0;
}

int64_t RecurrentModel::state_bytes() const {
  int64_t bytes = 0;
  for (const Front& front : fronts_) {
    bytes += front.numerator.numel() * front.numerator.element_size();
    bytes += front.denominator.numel() * front.denominator.element_size();
  }
  return bytes;
}

absl::StatusOr<at::Tensor> RecurrentModel::Feed(absl::Span<const int64_t> tokens) {
  const ModelConfig& config = model_.config();
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to feed");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config.vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " = ", tokens[i], " is outside the vocabulary [0, ", config.vocab, ")"));
    }
  }
  try {
    at::NoGradGuard no_grad;
    const at::Device device = model_.device();
    const Inference bound{weights_, projections_};
    std::vector<Front> fronts = fronts_;  // committed only when every stretch ran
    int64_t position = position_;
    at::Tensor last;
    for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(options_.stretch)) {
      const size_t end = std::min(tokens.size(), begin + static_cast<size_t>(options_.stretch));
      const int64_t rows = static_cast<int64_t>(end - begin);
      std::vector<int64_t> positions(rows);
      for (int64_t i = 0; i < rows; ++i) positions[i] = position + i;
      const std::vector<Segment> segments = {Segment{0, rows, /*continues_front=*/position > 0}};
      const at::Tensor x = ForwardStretch(
          config, bound,
          LongTensor(std::vector<int64_t>(tokens.begin() + begin, tokens.begin() + end), device),
          LongTensor(positions, device), segments, &fronts);
      last = x.narrow(0, rows - 1, 1);
      position += rows;
    }
    const at::Tensor logits = AddBiasProduct(
        weights_.output_bias, last, ForwardOperand(weights_.output_forward_t, weights_.output_weight_t));
    at::Tensor log_probs = at::log_softmax(logits.to(at::kDouble), 1).squeeze(0).to(at::kCPU);
    fronts_ = std::move(fronts);
    position_ = position;
    return log_probs;
  } catch (const c10::Error& e) {
    return FromTorchError(e, absl::StrCat("running ", tokens.size(), " tokens at position ", position_));
  }
}

}  // namespace slimfit::performer
