// The fused CUDA prefix-sum kernels (prefix_attention_cuda.h) against the LibTorch block form of
// prefix_attention.cc: their thread-block bodies on the CPU through an emulated thread block
// (always: this is what checks them on machines without a GPU), and the kernels themselves on a
// CUDA device (skipped where the build has no kernels or no device is visible).
#include "performer/prefix_attention_cuda.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "performer/emulated_thread_block.h"
#include "performer/prefix_attention.h"
#include "performer/prefix_attention_kernel_bodies.h"

namespace slimfit::performer {
namespace {

struct Case {
  int64_t heads, rows, features, dim, block;
  std::string Name() const {
    return absl::StrCat(heads, "x", rows, " rows, M=", features, ", d=", dim, ", block ", block);
  }
};

// One block shorter than `block`, one exactly a block, two blocks (the second partial or full), and
// three blocks (more than the wrapper hands the kernels, which the bodies handle all the same).
const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {{2, 1, 3, 4, 64},  {2, 5, 3, 4, 64}, {3, 16, 8, 5, 64},
                                          {2, 64, 6, 7, 64}, {2, 16, 5, 4, 8}, {2, 13, 4, 3, 8},
                                          {2, 20, 4, 3, 8},  {1, 9, 1, 1, 4}};
  return cases;
}

struct Inputs {
  at::Tensor q, k, v, r0, z0;           // the forward's
  at::Tensor gn, gd, g_end_r, g_end_z;  // its outputs' gradients
};

// In float64 on the CPU. φq and φk as the engine holds them (two views of one [2, heads, rows, M]
// tensor, positive as feature maps make them); the start numerator transposed, so that its
// innermost stride is not 1 and the wrapper's copy is exercised.
Inputs MakeInputs(const Case& c, uint64_t seed) {
  at::manual_seed(seed);
  const auto options = at::TensorOptions().dtype(at::kDouble);
  Inputs in;
  const at::Tensor phi = at::rand({2, c.heads, c.rows, c.features}, options);
  in.q = phi.select(0, 0);
  in.k = phi.select(0, 1);
  in.v = at::randn({c.heads, c.rows, c.dim}, options);
  in.r0 = at::randn({c.heads, c.dim, c.features}, options).transpose(1, 2);
  in.z0 = at::rand({c.heads, c.features}, options);
  in.gn = at::randn({c.heads, c.rows, c.dim}, options);
  in.gd = at::randn({c.heads, c.rows}, options);
  in.g_end_r = at::randn({c.heads, c.features, c.dim}, options);
  in.g_end_z = at::randn({c.heads, c.features}, options);
  return in;
}

Inputs Converted(const Inputs& in, at::ScalarType dtype, at::Device device) {
  auto to = [&](const at::Tensor& t) { return t.to(device, dtype); };
  return Inputs{to(in.q),  to(in.k),  to(in.v),       to(in.r0),     to(in.z0),
                to(in.gn), to(in.gd), to(in.g_end_r), to(in.g_end_z)};
}

void FillNan(const std::vector<at::Tensor>& tensors) {
  for (at::Tensor t : tensors) t.fill_(std::numeric_limits<double>::quiet_NaN());
}

// The kernels' bodies, one emulated thread block per head. Outputs and shared memory start as NaN,
// so an entry the bodies never write, or shared memory read before it is written, shows.
template <typename T>
FusedPrefixForward EmulatedForward(const Inputs& in, int64_t block, int64_t threads,
                                   EmulatedSchedule schedule = EmulatedSchedule::kConcurrent) {
  internal::PreparedForward<T> p = internal::PrepareForward<T>(in.q, in.k, in.v, in.r0, in.z0, block);
  FillNan({p.out.numerator, p.out.denominator, p.out.end_numerator, p.out.end_denominator});
  std::vector<T> shared(cuda_kernels::SharedElements(p.args.shape, 1));
  for (int64_t h = 0; h < p.args.shape.heads; ++h) {
    std::fill(shared.begin(), shared.end(), std::numeric_limits<T>::quiet_NaN());
    RunEmulatedThreadBlock(
        threads,
        [&](const EmulatedThreads& t) { cuda_kernels::PrefixForwardHead(t, p.args, h, shared.data()); },
        schedule);
  }
  return p.out;
}

template <typename T>
FusedPrefixGradients EmulatedBackward(const Inputs& in, int64_t block, int64_t threads,
                                      EmulatedSchedule schedule = EmulatedSchedule::kConcurrent) {
  internal::PreparedBackward<T> p = internal::PrepareBackward<T>(in.q, in.k, in.v, in.r0, in.z0, block, in.gn,
                                                                 in.gd, in.g_end_r, in.g_end_z);
  FillNan({p.out.q, p.out.k, p.out.v, p.out.r0, p.out.z0});
  std::vector<T> shared(cuda_kernels::SharedElements(p.args.shape, 2));
  for (int64_t h = 0; h < p.args.shape.heads; ++h) {
    std::fill(shared.begin(), shared.end(), std::numeric_limits<T>::quiet_NaN());
    RunEmulatedThreadBlock(
        threads,
        [&](const EmulatedThreads& t) { cuda_kernels::PrefixBackwardHead(t, p.args, h, shared.data()); },
        schedule);
  }
  return p.out;
}

// max |got − want| / max(1, max |want|), on the CPU in float64.
double Discrepancy(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
  if (!g.isfinite().all().item<bool>()) return std::numeric_limits<double>::infinity();
  const double scale = std::max(1.0, w.abs().max().item<double>());
  return (g - w).abs().max().item<double>() / scale;
}

struct Reference {
  PrefixAttentionResult forward;
  PrefixGradients backward;
};

// The LibTorch block form in float64 on the CPU (the fused CPU kernels serve float32 only).
Reference ReferenceOf(const Inputs& in, int64_t block) {
  Reference ref;
  ref.forward = ChunkedPrefixForward(in.q, in.k, in.v, Front{in.r0, in.z0}, block);
  ref.backward = ChunkedPrefixBackward(in.q, in.k, in.v, Front{in.r0, in.z0}, block, in.gn, in.gd,
                                       Front{in.g_end_r, in.g_end_z});
  return ref;
}

void ExpectForwardEqual(const FusedPrefixForward& got, const Reference& ref, double tolerance,
                        const std::string& what) {
  EXPECT_LE(Discrepancy(got.numerator, ref.forward.numerator), tolerance) << what << ": numerator";
  EXPECT_LE(Discrepancy(got.denominator, ref.forward.denominator), tolerance) << what << ": denominator";
  EXPECT_LE(Discrepancy(got.end_numerator, ref.forward.end.numerator), tolerance)
      << what << ": end numerator";
  EXPECT_LE(Discrepancy(got.end_denominator, ref.forward.end.denominator), tolerance)
      << what << ": end denominator";
}

void ExpectBackwardEqual(const FusedPrefixGradients& got, const Reference& ref, double tolerance,
                         const std::string& what) {
  EXPECT_LE(Discrepancy(got.q, ref.backward.phi_q), tolerance) << what << ": dφq";
  EXPECT_LE(Discrepancy(got.k, ref.backward.phi_k), tolerance) << what << ": dφk";
  EXPECT_LE(Discrepancy(got.v, ref.backward.v), tolerance) << what << ": dv";
  EXPECT_LE(Discrepancy(got.r0, ref.backward.start.numerator), tolerance) << what << ": dR0";
  EXPECT_LE(Discrepancy(got.z0, ref.backward.start.denominator), tolerance) << what << ": dZ0";
}

TEST(FusedCudaPrefixTest, KernelBodiesOnEmulatedThreadBlocksGiveTheLibTorchForm) {
  for (const Case& c : Cases()) {
    const Inputs in = MakeInputs(c, 7);
    const Reference ref = ReferenceOf(in, c.block);
    const Inputs in32 = Converted(in, at::kFloat, at::kCPU);
    // One thread (every loop walks all entries), a count that divides nothing, and a warp's worth
    // and more (several threads per row, idle threads in short loops), running freely; then 7
    // threads taking turns in order and in reverse, where a read not behind a sync of another
    // thread's write sees it in one order and not in the other.
    struct Run {
      int64_t threads;
      EmulatedSchedule schedule;
    };
    for (const Run& run : {Run{1, EmulatedSchedule::kConcurrent}, Run{7, EmulatedSchedule::kConcurrent},
                           Run{48, EmulatedSchedule::kConcurrent}, Run{7, EmulatedSchedule::kInOrder},
                           Run{7, EmulatedSchedule::kReverseOrder}}) {
      const char* order = run.schedule == EmulatedSchedule::kConcurrent ? "concurrently"
                          : run.schedule == EmulatedSchedule::kInOrder  ? "in turns"
                                                                        : "in turns, reversed";
      const std::string what = absl::StrCat(c.Name(), ", ", run.threads, " threads ", order);
      ExpectForwardEqual(EmulatedForward<double>(in, c.block, run.threads, run.schedule), ref, 1e-13,
                         what + ", float64");
      ExpectBackwardEqual(EmulatedBackward<double>(in, c.block, run.threads, run.schedule), ref, 1e-13,
                          what + ", float64");
      ExpectForwardEqual(EmulatedForward<float>(in32, c.block, run.threads, run.schedule), ref, 2e-6,
                         what + ", float32");
      ExpectBackwardEqual(EmulatedBackward<float>(in32, c.block, run.threads, run.schedule), ref, 2e-6,
                          what + ", float32");
    }
  }
}

// The engine hands the kernels segments narrowed out of a stretch's rows (prefix_attention.h's
// segments, explicit_backprop.cc's Rows): head strides longer than the rows, for φq, φk, v and the
// output gradients alike (a 2-D gD with a row stride of 1 and a head stride of the stretch).
TEST(FusedCudaPrefixTest, SegmentViewsGiveTheLibTorchForm) {
  const Case stretch{3, 40, 5, 4, 8};
  const Inputs whole = MakeInputs(stretch, 9);
  for (auto [begin, rows] : {std::pair<int64_t, int64_t>{0, 16}, {13, 11}, {37, 3}}) {
    Inputs in = whole;
    for (at::Tensor* t : {&in.q, &in.k, &in.v, &in.gn, &in.gd}) *t = t->narrow(1, begin, rows);
    ASSERT_FALSE(in.v.is_contiguous());
    const Reference ref = ReferenceOf(in, stretch.block);
    const std::string what = absl::StrCat("rows ", begin, " + ", rows);
    ExpectForwardEqual(EmulatedForward<double>(in, stretch.block, 7), ref, 1e-13, what);
    ExpectBackwardEqual(EmulatedBackward<double>(in, stretch.block, 7), ref, 1e-13, what);
  }
}

// FrontWithout's grid-stride body against the LibTorch form (after − FrontContribution), the front
// transposed and φk a view, as in the engine.
TEST(FusedCudaPrefixTest, FrontWithoutBodyOnEmulatedThreadsGivesTheLibTorchForm) {
  for (const Case& c : Cases()) {
    const Inputs in = MakeInputs(c, 5);
    const Front added = FrontContribution(in.k, in.v);
    const Front want{in.r0 - added.numerator, in.z0 - added.denominator};
    for (int64_t threads : {int64_t{1}, int64_t{7}, int64_t{48}}) {
      const std::string what = absl::StrCat(c.Name(), ", ", threads, " threads");
      internal::PreparedFrontWithout<double> p =
          internal::PrepareFrontWithout<double>(in.r0, in.z0, in.k, in.v);
      FillNan({p.out.numerator, p.out.denominator});
      RunEmulatedThreadBlock(threads,
                             [&](const EmulatedThreads& t) { cuda_kernels::FrontWithoutBody(t, p.args); });
      EXPECT_LE(Discrepancy(p.out.numerator, want.numerator), 1e-13) << what;
      EXPECT_LE(Discrepancy(p.out.denominator, want.denominator), 1e-13) << what;
    }
  }
  const Inputs in = MakeInputs(Cases()[0], 5);
  EXPECT_THROW(internal::PrepareFrontWithout<double>(in.r0, in.z0.narrow(1, 0, 1), in.k, in.v), c10::Error);
}

TEST(FusedCudaPrefixTest, TheyTakeOnlyEnabledCudaTensorsOfTheirShapes) {
  const Inputs in = MakeInputs(Cases()[2], 1);
  EnableFusedCudaKernels(true);
  EXPECT_FALSE(FusedCudaPrefixApplies(in.q, in.k, in.v, in.r0, in.z0, 64)) << "CPU tensors";
  if (FusedCudaKernelsBuilt() && at::hasCUDA()) {
    const Inputs cuda = Converted(in, at::kFloat, at::Device(at::kCUDA, 0));
    EXPECT_TRUE(FusedCudaPrefixApplies(cuda.q, cuda.k, cuda.v, cuda.r0, cuda.z0, 64));
    EXPECT_TRUE(FusedCudaPrefixApplies(cuda.q, cuda.k, cuda.v, cuda.r0, cuda.z0, 8))
        << "16 rows, two blocks of 8";
    EXPECT_FALSE(FusedCudaPrefixApplies(cuda.q, cuda.k, cuda.v, cuda.r0, cuda.z0, 4)) << "four blocks";
    EXPECT_FALSE(FusedCudaPrefixApplies(cuda.q, cuda.k, cuda.v.to(at::kDouble), cuda.r0, cuda.z0, 64))
        << "mixed";
    EXPECT_FALSE(FusedCudaPrefixApplies(cuda.q, cuda.k, cuda.v, cuda.r0.select(0, 0), cuda.z0, 64))
        << "shape";
    EnableFusedCudaKernels(false);
    EXPECT_FALSE(FusedCudaPrefixApplies(cuda.q, cuda.k, cuda.v, cuda.r0, cuda.z0, 64)) << "disabled";
  }
  EnableFusedCudaKernels(false);
  EXPECT_THROW(internal::PrepareForward<double>(in.q, in.k, in.v.narrow(1, 0, 3), in.r0, in.z0, 64),
               c10::Error);
}

TEST(FusedCudaPrefixTest, KernelsOnTheDeviceGiveTheLibTorchForm) {
  if (!FusedCudaKernelsBuilt())
    GTEST_SKIP() << "this build has no fused CUDA kernels (SLIMFIT_WITH_CUDA_KERNELS)";
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: nothing to run the kernels on";
  const at::Device cuda(at::kCUDA, 0);
  for (const Case& c : Cases()) {
    if (c.rows > kFusedCudaMaxBlocks * c.block) continue;
    const Inputs in = MakeInputs(c, 11);
    const Reference ref = ReferenceOf(in, c.block);
    for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
      const Inputs d = Converted(in, dtype, cuda);
      const double tolerance = dtype == at::kDouble ? 1e-13 : 2e-6;
      const std::string what = absl::StrCat(c.Name(), dtype == at::kDouble ? ", float64" : ", float32");
      EnableFusedCudaKernels(true);
      ASSERT_TRUE(FusedCudaPrefixApplies(d.q, d.k, d.v, d.r0, d.z0, c.block)) << what;
      ExpectForwardEqual(FusedPrefixForwardCuda(d.q, d.k, d.v, d.r0, d.z0, c.block), ref, tolerance, what);
      ExpectBackwardEqual(
          FusedPrefixBackwardCuda(d.q, d.k, d.v, d.r0, d.z0, c.block, d.gn, d.gd, d.g_end_r, d.g_end_z), ref,
          tolerance, what);
      // Through the block form's entry points, which dispatch to the kernels while they are on.
      const PrefixAttentionResult forward = ChunkedPrefixForward(d.q, d.k, d.v, Front{d.r0, d.z0}, c.block);
      EXPECT_LE(Discrepancy(forward.numerator, ref.forward.numerator), tolerance) << what;
      ASSERT_TRUE(FusedCudaFrontWithoutApplies(d.r0, d.z0, d.k, d.v)) << what;
      const Front added = FrontContribution(in.k, in.v);
      const FusedFront without = FusedFrontWithoutCuda(d.r0, d.z0, d.k, d.v);
      EXPECT_LE(Discrepancy(without.numerator, in.r0 - added.numerator), tolerance)
          << what << ": front without";
      EXPECT_LE(Discrepancy(without.denominator, in.z0 - added.denominator), tolerance)
          << what << ": front without";
      EnableFusedCudaKernels(false);
    }
  }
}

}  // namespace
}  // namespace slimfit::performer
