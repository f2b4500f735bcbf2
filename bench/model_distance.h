// How far apart two models are: the relative L2 distance over all their parameters, the worst
// tensor, the largest element difference, and whether they are bit-identical. scripts/chaos.sh uses
// it to compare the model a disturbed run exported with an undisturbed run of the same job spec.
//
// Example:
//   absl::StatusOr<ModelDistance> distance = CompareModelFiles("chaos.safetensors", "calm.safetensors");
//   if (!distance.ok()) return distance.status();
//   if (distance->relative_l2 > 1e-5) ...;
//
// The relative L2 distance is ‖a − b‖ / ‖b‖ with every tensor of both files flattened into one
// vector, in float64 (as performer::RelativeDiscrepancy, which the end-to-end tests use). Metadata
// (job id, round, parameter version) is not compared: two runs of one spec differ there by design.
//
// Thread safety: free functions without shared state.
#ifndef SLIMFIT_BENCH_MODEL_DISTANCE_H_
#define SLIMFIT_BENCH_MODEL_DISTANCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "performer/safetensors.h"

namespace slimfit::bench {

struct TensorDistance {
  std::string name;
  int64_t elements = 0;
  double relative_l2 = 0;         // ‖a − b‖ / ‖b‖ of this tensor; ‖a − b‖ when ‖b‖ = 0
  double max_abs_difference = 0;  // max |a − b| over its elements
  bool bit_identical = false;     // same bytes
};

struct ModelDistance {
  int64_t elements = 0;                 // parameters compared
  double relative_l2 = 0;               // over every tensor together
  double max_abs_difference = 0;        // over every element
  bool bit_identical = false;           // every tensor has the same bytes
  std::vector<TensorDistance> tensors;  // by name
  // The tensor with the largest relative_l2 (the first in name order on a tie); "" when empty.
  std::string worst_tensor;
  double worst_relative_l2 = 0;
};

// Compares `got` with `reference` tensor by tensor. INVALID_ARGUMENT naming the tensor when the
// two hold different tensor names, or a tensor of another shape or dtype; and when `reference` is
// zero everywhere while `got` is not (no relative distance exists).
absl::StatusOr<ModelDistance> CompareModels(const performer::TensorFile& got,
                                            const performer::TensorFile& reference);

// Reads both safetensors files (performer::ReadSafetensors's errors, naming the path) and compares
// them with CompareModels.
absl::StatusOr<ModelDistance> CompareModelFiles(const std::string& got_path,
                                                const std::string& reference_path);

}  // namespace slimfit::bench

#endif  // SLIMFIT_BENCH_MODEL_DISTANCE_H_
