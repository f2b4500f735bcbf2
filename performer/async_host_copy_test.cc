#include "performer/async_host_copy.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace slimfit::performer {
namespace {

TEST(AsyncHostCopyTest, NothingToReadIsUndefined) {
  AsyncHostCopy copy;
  EXPECT_FALSE(copy.Read().defined());
}

TEST(AsyncHostCopyTest, ReadsTheValueOnTheHostContiguous) {
  const at::Tensor value = at::arange(12, at::kDouble).reshape({3, 4}).t();  // not contiguous
  AsyncHostCopy copy(value);
  const at::Tensor read = copy.Read();
  EXPECT_TRUE(read.device().is_cpu());
  EXPECT_TRUE(read.is_contiguous());
  EXPECT_TRUE(at::equal(read, value));
  EXPECT_TRUE(at::equal(copy.Read(), value)) << "a second Read gives the same";
}

TEST(AsyncHostCopyTest, ReadsTheValueAtTheTimeOfTheCopyOnTheCpuToo) {
  at::Tensor value = at::full({4}, 7.0, at::kDouble);  // contiguous: `to` alone would alias it
  AsyncHostCopy copy(value);
  value.fill_(-1);
  EXPECT_TRUE(at::equal(copy.Read(), at::full({4}, 7.0, at::kDouble)));
}

// On a GPU: the value the device holds when the copy is queued, even where the device is still
// busy with earlier work and later work overwrites the source.
TEST(AsyncHostCopyTest, OnCudaReadsTheValueAtTheTimeOfTheCopy) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const at::Device cuda(at::kCUDA, 0);
  at::Tensor a = at::randn({2048, 2048}, at::TensorOptions().device(cuda));
  at::Tensor source = at::zeros({4}, at::TensorOptions().dtype(at::kDouble).device(cuda));
  for (int i = 0; i < 20; ++i) a = at::matmul(a, a).tanh();      // keeps the device busy
  source.add_((a.sum().to(at::kDouble) * 0).nan_to_num(0) + 7);  // 7 everywhere, after the work above
  AsyncHostCopy copy(source);
  source.fill_(-1);  // queued after the copy
  const at::Tensor read = copy.Read();
  EXPECT_TRUE(read.device().is_cpu());
  EXPECT_TRUE(at::equal(read, at::full({4}, 7.0, at::kDouble)));
}

}  // namespace
}  // namespace slimfit::performer
