// Test helpers shared by the transformer baselines' tests: shapes, batches, moments, and the
// INVALID_ARGUMENT check. Test-only.
#ifndef SLIMFIT_PLANNER_TRANSFORMER_BASELINES_TESTING_H_
#define SLIMFIT_PLANNER_TRANSFORMER_BASELINES_TESTING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "planner/transformer_baselines.h"

namespace slimfit::planner::transformer_testing {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

inline TransformerShape Shape(int64_t d_model, int64_t heads, int64_t d_ff = 0, int bytes = 2,
                              bool dropout = true, int64_t layers = 1) {
  TransformerShape shape;
  shape.d_model = d_model;
  shape.layers = layers;
  shape.heads = heads;
  shape.d_ff = d_ff;
  shape.bytes_per_element = bytes;
  shape.dropout = dropout;
  return shape;
}

inline BatchMoments Moments(const BatchSpec& batch) {
  absl::StatusOr<BatchMoments> moments = ComputeBatchMoments(batch);
  EXPECT_TRUE(moments.ok()) << moments.status();
  return moments.ok() ? *moments : BatchMoments{};
}

// `sequences` sequences of `length` tokens.
inline BatchSpec Equal(int64_t sequences, int64_t length) {
  return BatchSpec::Explicit(std::vector<int64_t>(sequences, length));
}

inline void ExpectInvalid(const absl::Status& status, absl::string_view fragment) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), fragment))
      << "message \"" << status.message() << "\" lacks \"" << fragment << "\"";
}

}  // namespace slimfit::planner::transformer_testing

#endif  // SLIMFIT_PLANNER_TRANSFORMER_BASELINES_TESTING_H_
