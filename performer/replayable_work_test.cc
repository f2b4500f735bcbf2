// ReplayableWork: the phases on any device (kRerun), and on a GPU in the CUDA build that a replay
// is the captured work run on new inputs — host code skipped, device work (autograd included)
// redone — and that a capture that cannot work fails cleanly. The CUDA tests skip (GTEST_SKIP)
// without a GPU or without a build that has CUDA graphs (scripts/cuda/).
#include "performer/replayable_work.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace slimfit::performer {
namespace {

using Phase = ReplayableWork::Phase;

TEST(ReplayableWorkTest, RerunCallsTheBodyInEveryPhase) {
  ReplayableWork work(ReplayableWork::Mode::kRerun, at::kCPU);
  at::Tensor in = at::full({3}, 1.0);
  at::Tensor out = at::zeros({3});
  int calls = 0;
  auto body = [&] {
    ++calls;
    out.copy_(in * 2 + 1);
  };
  EXPECT_EQ(work.next_phase(), Phase::kWarmUp);
  work.Run(body);
  EXPECT_EQ(work.next_phase(), Phase::kCapture);
  in.fill_(2.0);
  work.Run(body);
  EXPECT_EQ(work.next_phase(), Phase::kReplay);
  in.fill_(3.0);
  work.Run(body);
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(at::equal(out, at::full({3}, 7.0)));
  EXPECT_FALSE(work.captured());
  EXPECT_EQ(work.pool_bytes(), 0);
}

// A capture made to fail throws before the body runs and does not count: the next Run is a capture
// again, and only as many captures fail as were asked for.
TEST(ReplayableWorkTest, CapturesFailedForTestingThrowBeforeTheBodyAndDoNotCount) {
  ReplayableWork work(ReplayableWork::Mode::kRerun, at::kCPU);
  int calls = 0;
  auto body = [&] { ++calls; };
  work.Run(body);  // warm-up: not a capture, so it does not fail
  ReplayableWork::FailCapturesForTesting(2);
  EXPECT_THROW(work.Run(body), c10::Error);
  EXPECT_THROW(work.Run(body), c10::Error);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(work.next_phase(), Phase::kCapture);
  work.Run(body);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(work.next_phase(), Phase::kReplay);
}

// Rerun mode cannot fail inside a capture it does not make: a failure asked for there throws before
// the body, as kBeforeBody does (slice_capture_failure_cuda_test breaks real captures on a GPU).
TEST(ReplayableWorkTest, FailuresInsideACaptureThrowBeforeTheBodyInRerunMode) {
  ReplayableWork work(ReplayableWork::Mode::kRerun, at::kCPU);
  int calls = 0;
  auto body = [&] { ++calls; };
  work.Run(body);
  ReplayableWork::FailCapturesForTesting(1, ReplayableWork::InjectedFailure::kInsideCapture);
  EXPECT_THROW(work.Run(body), c10::Error);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(work.next_phase(), Phase::kCapture);
  work.Run(body);
  EXPECT_EQ(calls, 2);
}

TEST(ReplayableWorkTest, CudaGraphModeNeedsTheBuildAndACudaDevice) {
  EXPECT_THROW(ReplayableWork(ReplayableWork::Mode::kCudaGraph, at::kCPU), c10::Error);
}

bool CanCapture() { return ReplayableWork::CudaGraphsBuilt() && at::hasCUDA(); }

#define SKIP_WITHOUT_CUDA_GRAPHS() \
  if (!CanCapture()) GTEST_SKIP() << "no CUDA device, or a build without CUDA graphs (scripts/cuda/)"

const at::Device kCuda(at::kCUDA, 0);

TEST(ReplayableWorkCudaTest, ReplaysRunTheCapturedWorkOnNewInputsWithoutItsHostCode) {
  SKIP_WITHOUT_CUDA_GRAPHS();
  ReplayableWork work(ReplayableWork::Mode::kCudaGraph, kCuda);
  const at::TensorOptions options = at::TensorOptions().dtype(at::kFloat).device(kCuda);
  at::Tensor in = at::full({1024}, 1.0, options);
  at::Tensor out = at::zeros({1024}, options);
  int host_calls = 0;
  auto body = [&] {
    ++host_calls;
    out.copy_(in.exp().log() * 2 + 1);  // scratch tensors from the graph's pool
  };
  work.Run(body);  // warm-up: runs directly
  EXPECT_FLOAT_EQ(out[7].item<float>(), 3.0f);
  in.fill_(2.0);
  work.Run(body);  // capture, then one launch
  EXPECT_TRUE(work.captured());
  EXPECT_EQ(host_calls, 2);
  EXPECT_FLOAT_EQ(out[7].item<float>(), 5.0f);
  for (int i = 3; i < 6; ++i) {
    in.fill_(static_cast<double>(i));
    work.Run(body);
    EXPECT_FLOAT_EQ(out[1000].item<float>(), 2.0f * i + 1) << "replay with input " << i;
  }
  EXPECT_EQ(host_calls, 2) << "a replay runs no host code";
  EXPECT_GT(work.pool_bytes(), 0) << "the capture's scratch came from a new private pool";
}

// What the sliced engine relies on: back-propagation inside the captured work, accumulating into
// a parameter's existing .grad in place.
TEST(ReplayableWorkCudaTest, ReplayedBackPropagationAccumulatesIntoTheGradient) {
  SKIP_WITHOUT_CUDA_GRAPHS();
  const at::TensorOptions options = at::TensorOptions().dtype(at::kDouble).device(kCuda);
  at::Tensor weight = at::full({4, 4}, 0.5, options).requires_grad_(true);
  at::Tensor x = at::zeros({8, 4}, options);
  ReplayableWork work(ReplayableWork::Mode::kCudaGraph, kCuda);
  auto body = [&] {
    const at::Tensor loss = at::matmul(x, weight).pow(2).sum();
    torch::autograd::backward({loss}, {}, /*retain_graph=*/false, /*create_graph=*/false, {weight});
  };
  at::Tensor expected = at::zeros({4, 4}, options);
  for (int i = 1; i <= 5; ++i) {
    x.copy_(at::rand({8, 4}, options));
    {
      // d/dW Σ (xW)² = 2 xᵀ(xW)
      at::NoGradGuard no_grad;
      expected += 2 * at::matmul(x.t(), at::matmul(x, weight));
    }
    work.Run(body);
  }
  EXPECT_TRUE(work.captured());
  EXPECT_TRUE(at::allclose(weight.grad(), expected, 1e-12, 1e-12));
}

TEST(ReplayableWorkCudaTest, ACaptureThatReadsADeviceValueFailsAndLeavesTheDeviceUsable) {
  SKIP_WITHOUT_CUDA_GRAPHS();
  const at::TensorOptions options = at::TensorOptions().dtype(at::kFloat).device(kCuda);
  at::Tensor in = at::ones({16}, options);
  at::Tensor out = at::zeros({16}, options);
  ReplayableWork work(ReplayableWork::Mode::kCudaGraph, kCuda);
  auto body = [&] { out.fill_(in.sum().item<float>()); };  // a host read: not capturable
  work.Run(body);
  EXPECT_FLOAT_EQ(out[0].item<float>(), 16.0f);
  EXPECT_THROW(work.Run(body), c10::Error);
  EXPECT_EQ(work.next_phase(), Phase::kCapture) << "a failed Run does not count";
  EXPECT_FALSE(work.captured());
  // The device still works, directly.
  body();
  EXPECT_FLOAT_EQ(out[3].item<float>(), 16.0f);
}

}  // namespace
}  // namespace slimfit::performer
