#include "bench/model_distance.h"

#include <ATen/ATen.h>

#include <cmath>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::bench {
namespace {

using ::testing::HasSubstr;

performer::TensorFile TwoTensors() {
  performer::TensorFile file;
  file.tensors["a.weight"] = at::tensor({3.0f, 4.0f});     // norm 5
  file.tensors["b.bias"] = at::zeros({2, 2}, at::kFloat);  // norm 0
  file.metadata["round"] = "7";
  return file;
}

TEST(ModelDistanceTest, IdenticalModelsAreBitIdenticalWhateverTheirMetadata) {
  performer::TensorFile got = TwoTensors();
  got.metadata["round"] = "9";
  absl::StatusOr<ModelDistance> distance = CompareModels(got, TwoTensors());
  ASSERT_TRUE(distance.ok()) << distance.status();
  EXPECT_TRUE(distance->bit_identical);
  EXPECT_EQ(distance->relative_l2, 0);
  EXPECT_EQ(distance->max_abs_difference, 0);
  EXPECT_EQ(distance->elements, 6);
  ASSERT_EQ(distance->tensors.size(), 2u);
  EXPECT_EQ(distance->tensors[0].name, "a.weight");
}

TEST(ModelDistanceTest, RelativeDistanceIsOverAllParametersTogether) {
  performer::TensorFile got = TwoTensors();
  got.tensors["a.weight"] = at::tensor({3.0f, 4.5f});  // difference 0.5
  got.tensors["b.bias"] = at::full({2, 2}, 0.25f);     // difference 0.5 in norm
  absl::StatusOr<ModelDistance> distance = CompareModels(got, TwoTensors());
  ASSERT_TRUE(distance.ok()) << distance.status();
  EXPECT_FALSE(distance->bit_identical);
  EXPECT_NEAR(distance->relative_l2, std::sqrt(0.25 + 0.25) / 5.0, 1e-12);
  EXPECT_DOUBLE_EQ(distance->max_abs_difference, 0.5);
  // b.bias is zero in the reference: its own distance is absolute (0.5), the worst of the two.
  EXPECT_EQ(distance->worst_tensor, "b.bias");
  EXPECT_NEAR(distance->worst_relative_l2, 0.5, 1e-12);
  EXPECT_NEAR(distance->tensors[0].relative_l2, 0.1, 1e-12);
}

TEST(ModelDistanceTest, OneFlippedLowBitIsNotBitIdenticalButTiny) {
  performer::TensorFile got = TwoTensors();
  got.tensors["a.weight"] = at::tensor({3.0f, std::nextafter(4.0f, 5.0f)});
  absl::StatusOr<ModelDistance> distance = CompareModels(got, TwoTensors());
  ASSERT_TRUE(distance.ok()) << distance.status();
  EXPECT_FALSE(distance->bit_identical);
  EXPECT_FALSE(distance->tensors[0].bit_identical);
  EXPECT_TRUE(distance->tensors[1].bit_identical);
  EXPECT_GT(distance->relative_l2, 0);
  EXPECT_LT(distance->relative_l2, 1e-7);
}

TEST(ModelDistanceTest, DifferentTensorsAreInvalidArgumentNamingTheTensor) {
  performer::TensorFile missing = TwoTensors();
  missing.tensors.erase("b.bias");
  absl::Status status = CompareModels(missing, TwoTensors()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("b.bias is only in the second model"));

  performer::TensorFile extra = TwoTensors();
  extra.tensors["c.weight"] = at::ones({1});
  status = CompareModels(extra, TwoTensors()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("c.weight is only in the first model"));

  performer::TensorFile reshaped = TwoTensors();
  reshaped.tensors["b.bias"] = at::zeros({4}, at::kFloat);
  status = CompareModels(reshaped, TwoTensors()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("b.bias is Float[4] in the first model and Float[2, 2] in the second"));

  performer::TensorFile retyped = TwoTensors();
  retyped.tensors["a.weight"] = at::tensor({3.0, 4.0}, at::kDouble);
  EXPECT_EQ(CompareModels(retyped, TwoTensors()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelDistanceTest, AZeroReferenceHasNoRelativeDistance) {
  performer::TensorFile zero;
  zero.tensors["w"] = at::zeros({3});
  performer::TensorFile other;
  other.tensors["w"] = at::ones({3});
  EXPECT_EQ(CompareModels(other, zero).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ModelDistance> same = CompareModels(zero, zero);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->relative_l2, 0);
}

TEST(ModelDistanceTest, FilesAreReadAndErrorsNameThePath) {
  const std::string got_path = testing_util::TempPath("got.safetensors");
  const std::string reference_path = testing_util::TempPath("reference.safetensors");
  performer::TensorFile got = TwoTensors();
  got.tensors["a.weight"] = at::tensor({3.0f, 4.5f});
  ASSERT_TRUE(performer::WriteSafetensors(got_path, got).ok());
  ASSERT_TRUE(performer::WriteSafetensors(reference_path, TwoTensors()).ok());
  absl::StatusOr<ModelDistance> distance = CompareModelFiles(got_path, reference_path);
  ASSERT_TRUE(distance.ok()) << distance.status();
  EXPECT_NEAR(distance->relative_l2, 0.1, 1e-12);

  absl::Status missing = CompareModelFiles(got_path, testing_util::TempPath("absent.safetensors")).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("absent.safetensors"));
}

}  // namespace
}  // namespace slimfit::bench
