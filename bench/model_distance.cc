#include "bench/model_distance.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace slimfit::bench {
namespace {

std::string ShapeText(const at::Tensor& tensor) {
  std::string text = "[";
  for (int64_t i = 0; i < tensor.dim(); ++i) absl::StrAppend(&text, i > 0 ? ", " : "", tensor.size(i));
  return text + "]";
}

bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.contiguous();
  const at::Tensor y = b.contiguous();
  const size_t bytes = static_cast<size_t>(x.numel()) * x.element_size();
  return bytes == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), bytes) == 0;
}

}  // namespace

absl::StatusOr<ModelDistance> CompareModels(const performer::TensorFile& got,
                                            const performer::TensorFile& reference) {
  for (const auto& [name, tensor] : got.tensors) {
    if (reference.tensors.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is only in the first model"));
    }
  }
  ModelDistance distance;
  distance.bit_identical = true;
  double difference_squared = 0;
  double reference_squared = 0;
  for (const auto& [name, want] : reference.tensors) {
    auto it = got.tensors.find(name);
    if (it == got.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is only in the second model"));
    }
    const at::Tensor& have = it->second;
    if (have.scalar_type() != want.scalar_type() || !have.sizes().equals(want.sizes())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", name, " is ", at::toString(have.scalar_type()), ShapeText(have),
          " in the first model and ", at::toString(want.scalar_type()), ShapeText(want), " in the second"));
    }
    TensorDistance tensor;
    tensor.name = name;
    tensor.elements = want.numel();
    tensor.bit_identical = SameBytes(have, want);
    const at::Tensor w = want.to(at::kDouble);
    const at::Tensor difference = have.to(at::kDouble) - w;
    const double tensor_difference_squared = tensor.elements > 0 ? difference.pow(2).sum().item<double>() : 0;
    const double tensor_reference_squared = tensor.elements > 0 ? w.pow(2).sum().item<double>() : 0;
    tensor.max_abs_difference = tensor.elements > 0 ? difference.abs().max().item<double>() : 0;
    tensor.relative_l2 = tensor_reference_squared > 0
                             ? std::sqrt(tensor_difference_squared / tensor_reference_squared)
                             : std::sqrt(tensor_difference_squared);
    difference_squared += tensor_difference_squared;
    reference_squared += tensor_reference_squared;
    distance.elements += tensor.elements;
    distance.bit_identical = distance.bit_identical && tensor.bit_identical;
    distance.max_abs_difference = std::max(distance.max_abs_difference, tensor.max_abs_difference);
    if (distance.worst_tensor.empty() || tensor.relative_l2 > distance.worst_relative_l2) {
      distance.worst_tensor = name;
      distance.worst_relative_l2 = tensor.relative_l2;
    }
    distance.tensors.push_back(std::move(tensor));
  }
  if (reference_squared == 0 && difference_squared > 0) {
    return absl::InvalidArgumentError("the second model is zero everywhere: no relative distance to it");
  }
  distance.relative_l2 = reference_squared > 0 ? std::sqrt(difference_squared / reference_squared) : 0;
  return distance;
}

absl::StatusOr<ModelDistance> CompareModelFiles(const std::string& got_path,
                                                const std::string& reference_path) {
  absl::StatusOr<performer::TensorFile> got = performer::ReadSafetensors(got_path);
  if (!got.ok()) return got.status();
  absl::StatusOr<performer::TensorFile> reference = performer::ReadSafetensors(reference_path);
  if (!reference.ok()) return reference.status();
  absl::StatusOr<ModelDistance> distance = CompareModels(*got, *reference);
  if (!distance.ok()) {
    return absl::Status(distance.status().code(), absl::StrCat(got_path, " against ", reference_path, ": ",
                                                               distance.status().message()));
  }
  return distance;
}

}  // namespace slimfit::bench
