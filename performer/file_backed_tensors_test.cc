#include "performer/file_backed_tensors.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace slimfit::performer {
namespace {

TEST(FileBackedTensorsTest, ZerosShapedAndTypedLikeTheTemplate) {
  const at::Tensor like = at::randn({33, 65}, at::kDouble);
  absl::StatusOr<at::Tensor> t = FileBackedZerosLike(::testing::TempDir(), like);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->sizes().equals(like.sizes()));
  EXPECT_EQ(t->scalar_type(), at::kDouble);
  EXPECT_TRUE(t->is_contiguous());
  EXPECT_FALSE(t->requires_grad());
  EXPECT_EQ(t->abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(IsFileBacked(*t));
  EXPECT_FALSE(IsFileBacked(like));
  EXPECT_FALSE(IsFileBacked(at::Tensor()));
}

TEST(FileBackedTensorsTest, ValuesSurviveReleasingThePagesAndViewsShareTheFile) {
  const at::Tensor values = at::randn({1024, 1024});  // 4 MiB
  absl::StatusOr<at::Tensor> t = FileBackedZerosLike(::testing::TempDir(), values);
  ASSERT_TRUE(t.ok()) << t.status();
  t->copy_(values);
  EXPECT_GE(ResidentBytes(*t), 4 << 20);
  const at::Tensor view = t->narrow(0, 512, 512);
  EXPECT_TRUE(IsFileBacked(view));
  ReleaseResidentPages(view);  // the whole storage, not the view's rows alone
  EXPECT_EQ(ResidentBytes(*t), 0);
  EXPECT_TRUE(at::equal(*t, values));
  t->mul_(2);
  ReleaseResidentPages(*t);
  EXPECT_TRUE(at::equal(*t, values * 2));
}

TEST(FileBackedTensorsTest, AnonymousMemoryIsLeftAlone) {
  const at::Tensor values = at::randn({256, 256});
  at::Tensor copy = values.clone();
  ReleaseResidentPages(copy);  // would zero anonymous pages if it did anything
  EXPECT_TRUE(at::equal(copy, values));
  EXPECT_EQ(ResidentBytes(copy), -1);
}

TEST(FileBackedTensorsTest, OutlivesTheTensorItWasMadeFrom) {
  at::Tensor view;
  {
    absl::StatusOr<at::Tensor> t = FileBackedZerosLike(::testing::TempDir(), at::ones({4096}));
    ASSERT_TRUE(t.ok()) << t.status();
    t->fill_(3);
    view = t->narrow(0, 10, 5);
  }
  EXPECT_TRUE(at::equal(view, at::full({5}, 3.0)));
}

TEST(FileBackedTensorsTest, AnEmptyTensorWorks) {
  absl::StatusOr<at::Tensor> t = FileBackedZerosLike(::testing::TempDir(), at::ones({0, 3}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->numel(), 0);
  EXPECT_TRUE(t->sizes().equals({0, 3}));
}

TEST(FileBackedTensorsTest, AMissingDirectoryIsAnError) {
  absl::StatusOr<at::Tensor> t = FileBackedZerosLike("/nonexistent/moments", at::ones({4}));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace slimfit::performer
