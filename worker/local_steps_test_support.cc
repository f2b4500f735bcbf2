#include "worker/local_steps_test_support.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "performer/gradient_engine.h"
#include "performer/safetensors.h"

namespace slimfit::worker::local_steps_testing {

performer::ModelConfig Tiny() {
  performer::ModelConfig config;
  config.vocab = 16;
  config.d_model = 8;
  config.layers = 1;
  config.heads = 2;
  config.d_ff = 8;
  return config;
}

performer::PerformerModel Model(uint64_t seed) {
  absl::StatusOr<performer::PerformerModel> model =
      performer::PerformerModel::Create(Tiny(), performer::DType::kFloat64, at::kCPU, seed);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

performer::PerformerModel ModelAt(const std::vector<at::Tensor>& parameters) {
  std::map<std::string, at::Tensor> named;
  const std::vector<std::string> names = performer::ParameterNames(Tiny());
  for (size_t i = 0; i < names.size(); ++i) named[names[i]] = parameters[i];
  absl::StatusOr<performer::PerformerModel> model =
      performer::PerformerModel::FromTensors(Tiny(), named, performer::DType::kFloat64, at::kCPU);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

performer::PackedBatch Sequence(int64_t length, int64_t salt, std::vector<int64_t> doc_starts) {
  performer::PackedBatch batch;
  for (int64_t i = 0; i < length; ++i) batch.tokens.push_back((i * 5 + salt * 3 + i / 3) % Tiny().vocab);
  batch.doc_starts = std::move(doc_starts);
  return batch;
}

std::vector<performer::PackedBatch> Shard() {
  return {Sequence(6, 1), Sequence(6, 2, {0, 3}), Sequence(4, 3), Sequence(6, 4)};
}

std::vector<int64_t> PredictedTokens(const std::vector<performer::PackedBatch>& sequences) {
  std::vector<int64_t> predicted;
  for (const performer::PackedBatch& batch : sequences)
    predicted.push_back(performer::PredictedTokenCount(batch));
  return predicted;
}

performer::Plan FullPlan() {
  performer::Plan plan;  // slice 0: full back-propagation
  plan.dtype = performer::DType::kFloat64;
  return plan;
}

SumGradients Engine(const std::vector<performer::PackedBatch>* sequences, int* calls) {
  return [sequences, calls](const performer::PerformerModel& model, size_t begin, size_t end,
                            int64_t normalizer) -> absl::StatusOr<SequenceSum> {
    if (calls != nullptr) ++*calls;
    performer::GradientOptions options;
    options.loss_normalizer = normalizer;
    SequenceSum total;
    for (size_t i = begin; i < end; ++i) {
      const performer::PackedBatch& batch = (*sequences)[i];
      if (performer::PredictedTokenCount(batch) == 0) continue;
      absl::StatusOr<performer::GradientResult> result =
          performer::ComputeGradient(model, batch, FullPlan(), options);
      if (!result.ok()) return result.status();
      if (total.gradient.empty()) {
        total.gradient = std::move(result->gradients);
      } else {
        for (size_t t = 0; t < total.gradient.size(); ++t) total.gradient[t].add_(result->gradients[t]);
      }
      total.loss_sum += result->loss_sum;
      total.token_count += result->token_count;
      total.slice_forwards += result->slice_forwards;
      total.peak_bytes = std::max(total.peak_bytes, result->peak_bytes);
    }
    return total;
  };
}

SumGradients OutOfMemory() {
  return [](const performer::PerformerModel&, size_t, size_t, int64_t) -> absl::StatusOr<SequenceSum> {
    return absl::ResourceExhaustedError("out of memory");
  };
}

v1::LocalSteps Steps(std::vector<int64_t> sequences_per_step, const v1::Optimizer& inner) {
  v1::LocalSteps local;
  for (int64_t n : sequences_per_step) local.add_sequences_per_step(n);
  *local.mutable_inner_optimizer() = inner;
  return local;
}

v1::LocalSteps Compressed(v1::LocalSteps local, v1::Compression compression) {
  local.set_compression(compression);
  return local;
}

v1::Optimizer Sgd(double learning_rate) {
  v1::Optimizer optimizer;
  optimizer.mutable_sgd();
  optimizer.set_learning_rate(learning_rate);
  optimizer.set_warmup_steps(0);
  return optimizer;
}

v1::Optimizer AdamW() {
  v1::Optimizer optimizer;
  optimizer.mutable_adamw();
  optimizer.set_learning_rate(0.02);
  optimizer.set_warmup_steps(3);
  optimizer.set_weight_decay(0.01);
  return optimizer;
}

std::vector<at::Tensor> Clone(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> copies;
  for (const at::Tensor& t : tensors) copies.push_back(t.detach().clone());
  return copies;
}

std::vector<at::Tensor> Sum(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> sum;
  for (const std::vector<at::Tensor>& list : lists) {
    EXPECT_EQ(list.size(), lists[0].size());
    for (size_t i = 0; i < list.size(); ++i) {
      if (sum.size() <= i) {
        sum.push_back(list[i].to(at::kDouble).clone());
      } else {
        sum[i] += list[i].to(at::kDouble);
      }
    }
  }
  return sum;
}

double MaxAbsDifference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double most = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    most = std::max(most, (a[i].to(at::kDouble) - b[i].to(at::kDouble)).abs().max().item<double>());
  }
  return most;
}

double MaxAbs(const std::vector<at::Tensor>& tensors) {
  double most = 0;
  for (const at::Tensor& t : tensors) most = std::max(most, t.abs().max().item<double>());
  return most;
}

double FloatTolerance(const std::vector<at::Tensor>& values) { return 1e-6 * MaxAbs(values); }

std::string StateFile(const std::string& dir) { return absl::StrCat(dir, "/", kJob, ".safetensors"); }

std::string FeedbackFile(const std::string& dir) { return absl::StrCat(dir, "/", kJob, ".feedback"); }

std::vector<at::Tensor> ReadFeedback(const std::string& dir) {
  absl::StatusOr<performer::TensorFile> file = performer::ReadSafetensors(FeedbackFile(dir));
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return {};
  const std::vector<std::string> names = performer::ParameterNames(Tiny());
  const std::vector<std::vector<int64_t>> shapes = performer::ParameterShapes(Tiny());
  EXPECT_EQ(file->tensors.size(), names.size());
  std::vector<at::Tensor> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = file->tensors.find(names[i]);
    if (it == file->tensors.end()) {
      ADD_FAILURE() << "the feedback file lacks " << names[i];
      return {};
    }
    EXPECT_EQ(it->second.scalar_type(), at::kFloat) << names[i];
    EXPECT_EQ(it->second.sizes().vec(), shapes[i]) << names[i];
    tensors.push_back(it->second);
  }
  return tensors;
}

std::vector<at::Tensor> Decoded(const std::vector<performer::EncodedTensor>& encoded) {
  std::vector<at::Tensor> decoded;
  for (const performer::EncodedTensor& tensor : encoded) {
    absl::StatusOr<at::Tensor> values = performer::DecodeTensor(tensor);
    EXPECT_TRUE(values.ok()) << values.status();
    decoded.push_back(values.ok() ? *values : at::Tensor());
  }
  return decoded;
}

void ExpectSendsItsEncoding(const LocalStepsResult& result, const performer::PerformerModel& start,
                            v1::Compression compression) {
  ASSERT_EQ(result.encoded.size(), start.parameters().size());
  ASSERT_EQ(result.sum.gradient.size(), start.parameters().size());
  const std::vector<at::Tensor> decoded = Decoded(result.encoded);
  for (size_t i = 0; i < result.encoded.size(); ++i) {
    const performer::EncodedTensor& encoded = result.encoded[i];
    const int64_t numel = start.parameters()[i].numel();
    EXPECT_EQ(encoded.compression, compression) << start.names()[i];
    EXPECT_EQ(encoded.shape, start.parameters()[i].sizes().vec()) << start.names()[i];
    EXPECT_EQ(static_cast<int64_t>(encoded.data.size()),
              numel * performer::CompressedElementBytes(compression))
        << start.names()[i];
    EXPECT_EQ(static_cast<int64_t>(encoded.scales.size()),
              compression == v1::COMPRESSION_INT8
                  ? (numel + v1::LIMIT_INT8_BLOCK_ELEMENTS - 1) / v1::LIMIT_INT8_BLOCK_ELEMENTS
                  : 0)
        << start.names()[i];
    EXPECT_EQ(result.sum.gradient[i].scalar_type(), at::kDouble) << start.names()[i];
    EXPECT_TRUE(at::equal(result.sum.gradient[i], decoded[i].to(at::kDouble))) << start.names()[i];
  }
}

void ExpectWithinInt8Bound(const std::vector<performer::EncodedTensor>& encoded,
                           const std::vector<at::Tensor>& value) {
  ASSERT_EQ(encoded.size(), value.size());
  const int64_t block = v1::LIMIT_INT8_BLOCK_ELEMENTS;
  for (size_t i = 0; i < encoded.size(); ++i) {
    const at::Tensor x = value[i].to(at::kDouble).flatten();
    const at::Tensor decoded = performer::DecodeTensor(encoded[i]).value().to(at::kDouble).flatten();
    const int64_t n = x.numel();
    for (int64_t b = 0; b * block < n; ++b) {
      const int64_t length = std::min(block, n - b * block);
      const at::Tensor xs = x.narrow(0, b * block, length);
      const double scale = encoded[i].scales[static_cast<size_t>(b)];
      const double max_abs = xs.abs().max().item<double>();
      EXPECT_NEAR(scale, max_abs / 127, 1e-6 * max_abs) << "tensor " << i << " block " << b;
      const double error = (decoded.narrow(0, b * block, length) - xs).abs().max().item<double>();
      EXPECT_LE(error, scale / 2 * (1 + 1e-5) + 1e-6 * max_abs) << "tensor " << i << " block " << b;
    }
  }
}

}  // namespace slimfit::worker::local_steps_testing
