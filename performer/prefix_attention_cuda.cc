#include "performer/prefix_attention_cuda.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <limits>

#include "performer/emulated_thread_block.h"
#include "performer/prefix_attention_kernel_bodies.h"
#include "performer/prefix_shapes.h"

#if defined(SLIMFIT_WITH_CUDA_KERNELS)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace slimfit::performer {
namespace {

cuda_kernels::PrefixShape ShapeOf(const at::Tensor& q, const at::Tensor& v, int64_t block) {
  return cuda_kernels::PrefixShape{q.size(0), q.size(1), q.size(2), v.size(2), block};
}

// A tensor whose innermost stride is 1 (itself, or a contiguous copy kept in `kept`).
const at::Tensor& RowMajor(const at::Tensor& t, std::vector<at::Tensor>& kept) {
  if (t.dim() < 3 || t.stride(2) == 1 || t.size(2) == 1) return t;
  kept.push_back(t.contiguous());
  return kept.back();
}

// [heads, rows, width] or [heads, rows] (a 2-D tensor's "rows" are its second dimension).
template <typename T>
cuda_kernels::Strided<const T> In(const at::Tensor& t, std::vector<at::Tensor>& kept) {
  const at::Tensor& rows = RowMajor(t, kept);
  return {rows.data_ptr<T>(), rows.stride(0), rows.stride(1)};
}

template <typename T>
cuda_kernels::Strided<T> Out(const at::Tensor& t) {
  return {t.data_ptr<T>(), t.stride(0), t.stride(1)};
}

// Dynamic shared memory a thread block may use where `t` lives (−1: unknown). An emulated block's
// is a host buffer: no limit.
int64_t SharedBytesAllowed(const at::Tensor& t) {
  if (t.is_cpu()) return std::numeric_limits<int64_t>::max();
#if defined(SLIMFIT_WITH_CUDA_KERNELS)
  constexpr int kDevices = 64;
  static std::atomic<int64_t> cache[kDevices];  // 0: not asked yet, else the answer + 2
  const c10::DeviceIndex device = t.device().index();
  if (device < 0 || device >= kDevices) return cuda_kernels::MaxSharedBytesOptIn(device);
  int64_t entry = cache[device].load(std::memory_order_relaxed);
  if (entry == 0) {
    entry = cuda_kernels::MaxSharedBytesOptIn(device) + 2;
    cache[device].store(entry, std::memory_order_relaxed);
  }
  return entry - 2;
#else
  return -1;
#endif
}

// A thread-block body on emulated blocks, one per head, each with `shared_elements` of shared memory.
template <typename T, typename Body>
void EmulateBlocks(int64_t heads, int64_t shared_elements, const Body& body) {
  std::vector<T> shared(static_cast<size_t>(shared_elements));
  for (int64_t h = 0; h < heads; ++h) {
    RunEmulatedThreadBlock(kEmulatedBlockThreads,
                           [&](const EmulatedThreads& t) { body(t, h, shared.data()); });
  }
}

#if defined(SLIMFIT_WITH_CUDA_KERNELS)
// Launches on `like`'s device and its current stream; a refused launch is a c10::Error.
template <typename Launch>
void LaunchOn(const at::Tensor& like, const char* what, const Launch& launch) {
  const c10::cuda::CUDAGuard guard(like.device());
  const char* error = launch(c10::cuda::getCurrentCUDAStream(like.device().index()).stream());
  TORCH_CHECK(error == nullptr, "fused CUDA prefix sums: the ", what,
              " kernel did not launch (or an earlier asynchronous CUDA error surfaced): ", error);
}
#define SLIMFIT_LAUNCH_ON(like, what, launch) LaunchOn(like, what, launch)
#else
#define SLIMFIT_LAUNCH_ON(like, what, launch) \
  TORCH_CHECK(false, "fused CUDA prefix sums: this build has no CUDA kernels (", what, ")")
#endif

template <typename T>
FusedPrefixForward ForwardAs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
  internal::PreparedForward<T> p = internal::PrepareForward<T>(q, k, v, r0, z0, block);
  if (q.is_cpu()) {
    EmulateBlocks<T>(p.args.shape.heads, cuda_kernels::SharedElements(p.args.shape, 1),
                     [&](const EmulatedThreads& t, int64_t h, T* shared) {
                       cuda_kernels::PrefixForwardHead(t, p.args, h, shared);
                     });
  } else {
    SLIMFIT_LAUNCH_ON(q, "forward",
                      [&](CUstream_st* stream) { return cuda_kernels::LaunchPrefixForward(p.args, stream); });
  }
  CountFusedKernelRun(FusedKernel::kPrefixForward);
  return p.out;
}

template <typename T>
FusedPrefixGradients BackwardAs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                const at::Tensor& gn, const at::Tensor& gd, const at::Tensor& g_end_r,
                                const at::Tensor& g_end_z) {
  internal::PreparedBackward<T> p =
      internal::PrepareBackward<T>(q, k, v, r0, z0, block, gn, gd, g_end_r, g_end_z);
  if (q.is_cpu()) {
    EmulateBlocks<T>(p.args.shape.heads, cuda_kernels::SharedElements(p.args.shape, 2),
                     [&](const EmulatedThreads& t, int64_t h, T* shared) {
                       cuda_kernels::PrefixBackwardHead(t, p.args, h, shared);
                     });
  } else {
    SLIMFIT_LAUNCH_ON(q, "backward", [&](CUstream_st* stream) {
      return cuda_kernels::LaunchPrefixBackward(p.args, stream);
    });
  }
  CountFusedKernelRun(FusedKernel::kPrefixBackward);
  return p.out;
}

template <typename T>
FusedFront FrontWithoutAs(const at::Tensor& after_r, const at::Tensor& after_z, const at::Tensor& k,
                          const at::Tensor& v) {
  internal::PreparedFrontWithout<T> p = internal::PrepareFrontWithout<T>(after_r, after_z, k, v);
  if (k.is_cpu()) {
    RunEmulatedThreadBlock(kEmulatedGridThreads,
                           [&](const EmulatedThreads& t) { cuda_kernels::FrontWithoutBody(t, p.args); });
  } else {
    SLIMFIT_LAUNCH_ON(k, "front",
                      [&](CUstream_st* stream) { return cuda_kernels::LaunchFrontWithout(p.args, stream); });
  }
  CountFusedKernelRun(FusedKernel::kFrontWithout);
  return p.out;
}

#undef SLIMFIT_LAUNCH_ON

}  // namespace

bool FusedCudaPrefixApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
  if (!FusedCudaKernelsTakeAll({&q, &k, &v, &r0, &z0}) || !PrefixShapesHold(q, k, v, r0, z0, block))
    return false;
  if (q.size(1) < 1 || q.size(1) > kFusedCudaMaxBlocks * block) return false;
  // The backward's tiles: the larger.
  const int64_t bytes = cuda_kernels::SharedElements(ShapeOf(q, v, block), 2) * q.element_size();
  return bytes <= SharedBytesAllowed(q);
}

bool FusedCudaPrefixBackwardApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                    const at::Tensor& grad_numerator, const at::Tensor& grad_denominator,
                                    const at::Tensor& grad_end_numerator,
                                    const at::Tensor& grad_end_denominator) {
  return FusedCudaPrefixApplies(q, k, v, r0, z0, block) &&
         FusedCudaKernelsTakeAll(
             {&q, &grad_numerator, &grad_denominator, &grad_end_numerator, &grad_end_denominator}) &&
         PrefixGradientShapesHold(q, v, r0, z0, grad_numerator, grad_denominator, grad_end_numerator,
                                  grad_end_denominator);
}

FusedPrefixForward FusedPrefixForwardCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
  TORCH_CHECK(FusedCudaPrefixApplies(q, k, v, r0, z0, block),
              "fused CUDA prefix sums: these tensors are not theirs");
  return q.scalar_type() == at::kFloat ? ForwardAs<float>(q, k, v, r0, z0, block)
                                       : ForwardAs<double>(q, k, v, r0, z0, block);
}

FusedPrefixGradients FusedPrefixBackwardCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                             const at::Tensor& grad_numerator,
                                             const at::Tensor& grad_denominator,
                                             const at::Tensor& grad_end_numerator,
                                             const at::Tensor& grad_end_denominator) {
  TORCH_CHECK(FusedCudaPrefixBackwardApplies(q, k, v, r0, z0, block, grad_numerator, grad_denominator,
                                             grad_end_numerator, grad_end_denominator),
              "fused CUDA prefix sums: these tensors are not theirs");
  return q.scalar_type() == at::kFloat
             ? BackwardAs<float>(q, k, v, r0, z0, block, grad_numerator, grad_denominator, grad_end_numerator,
                                 grad_end_denominator)
             : BackwardAs<double>(q, k, v, r0, z0, block, grad_numerator, grad_denominator,
                                  grad_end_numerator, grad_end_denominator);
}

bool FusedCudaFrontWithoutApplies(const at::Tensor& after_numerator, const at::Tensor& after_denominator,
                                  const at::Tensor& k, const at::Tensor& v) {
  return FusedCudaKernelsTakeAll({&k, &v, &after_numerator, &after_denominator}) &&
         PrefixShapesHold(k, k, v, after_numerator, after_denominator, /*block=*/1);
}

FusedFront FusedFrontWithoutCuda(const at::Tensor& after_numerator, const at::Tensor& after_denominator,
                                 const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(FusedCudaFrontWithoutApplies(after_numerator, after_denominator, k, v),
              "fused CUDA front: these tensors are not its");
  return k.scalar_type() == at::kFloat ? FrontWithoutAs<float>(after_numerator, after_denominator, k, v)
                                       : FrontWithoutAs<double>(after_numerator, after_denominator, k, v);
}

namespace internal {

template <typename T>
PreparedForward<T> PrepareForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
  CheckPrefixShapes("fused CUDA prefix sums", q, k, v, r0, z0, block);
  PreparedForward<T> p;
  const int64_t heads = q.size(0), rows = q.size(1), features = q.size(2), dim = v.size(2);
  p.out.numerator = at::empty({heads, rows, dim}, v.options());
  p.out.denominator = at::empty({heads, rows}, v.options());
  p.out.end_numerator = at::empty({heads, features, dim}, v.options());
  p.out.end_denominator = at::empty({heads, features}, v.options());
  cuda_kernels::PrefixForwardArgs<T>& a = p.args;
  a.shape = ShapeOf(q, v, block);
  a.q = In<T>(q, p.kept);
  a.k = In<T>(k, p.kept);
  a.v = In<T>(v, p.kept);
  a.r0 = In<T>(r0, p.kept);
  a.z0 = In<T>(z0, p.kept);
  a.numerator = Out<T>(p.out.numerator);
  a.denominator = Out<T>(p.out.denominator);
  a.end_r = Out<T>(p.out.end_numerator);
  a.end_z = Out<T>(p.out.end_denominator);
  return p;
}

template <typename T>
PreparedBackward<T> PrepareBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                    const at::Tensor& grad_numerator, const at::Tensor& grad_denominator,
                                    const at::Tensor& grad_end_numerator,
                                    const at::Tensor& grad_end_denominator) {
  CheckPrefixShapes("fused CUDA prefix sums", q, k, v, r0, z0, block);
  CheckPrefixGradientShapes("fused CUDA prefix sums", q, v, r0, z0, grad_numerator, grad_denominator,
                            grad_end_numerator, grad_end_denominator);
  PreparedBackward<T> p;
  const cuda_kernels::PrefixShape shape = ShapeOf(q, v, block);
  p.out.q = at::empty(q.sizes(), q.options());
  p.out.k = at::empty(k.sizes(), k.options());
  p.out.v = at::empty(v.sizes(), v.options());
  p.out.r0 = at::empty(r0.sizes(), r0.options());
  p.out.z0 = at::empty(z0.sizes(), z0.options());
  cuda_kernels::PrefixBackwardArgs<T>& a = p.args;
  a.shape = shape;
  a.q = In<T>(q, p.kept);
  a.k = In<T>(k, p.kept);
  a.v = In<T>(v, p.kept);
  a.r0 = In<T>(r0, p.kept);
  a.z0 = In<T>(z0, p.kept);
  a.grad_numerator = In<T>(grad_numerator, p.kept);
  a.grad_denominator = In<T>(grad_denominator, p.kept);
  a.grad_end_r = In<T>(grad_end_numerator, p.kept);
  a.grad_end_z = In<T>(grad_end_denominator, p.kept);
  a.grad_q = Out<T>(p.out.q);
  a.grad_k = Out<T>(p.out.k);
  a.grad_v = Out<T>(p.out.v);
  a.grad_r0 = Out<T>(p.out.r0);
  a.grad_z0 = Out<T>(p.out.z0);
  if (shape.Blocks() > 1) {
    const int64_t front = shape.features * shape.dim + shape.features;
    p.kept.push_back(at::empty({shape.heads, shape.Blocks() - 1, front}, q.options()));
    a.scratch = p.kept.back().template data_ptr<T>();
  }
  return p;
}

template <typename T>
PreparedFrontWithout<T> PrepareFrontWithout(const at::Tensor& after_numerator,
                                            const at::Tensor& after_denominator, const at::Tensor& k,
                                            const at::Tensor& v) {
  CheckPrefixShapes("fused CUDA front", k, k, v, after_numerator, after_denominator, /*block=*/1);
  PreparedFrontWithout<T> p;
  p.out.numerator = at::empty(after_numerator.sizes(), after_numerator.options());
  p.out.denominator = at::empty(after_denominator.sizes(), after_denominator.options());
  cuda_kernels::FrontWithoutArgs<T>& a = p.args;
  a.shape = cuda_kernels::PrefixShape{k.size(0), k.size(1), k.size(2), v.size(2), 1};
  a.k = In<T>(k, p.kept);
  a.v = In<T>(v, p.kept);
  a.after_r = In<T>(after_numerator, p.kept);
  a.after_z = In<T>(after_denominator, p.kept);
  a.r = p.out.numerator.template data_ptr<T>();
  a.z = p.out.denominator.template data_ptr<T>();
  return p;
}

template PreparedFrontWithout<float> PrepareFrontWithout<float>(const at::Tensor&, const at::Tensor&,
                                                                const at::Tensor&, const at::Tensor&);
template PreparedFrontWithout<double> PrepareFrontWithout<double>(const at::Tensor&, const at::Tensor&,
                                                                  const at::Tensor&, const at::Tensor&);
template PreparedForward<float> PrepareForward<float>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&, const at::Tensor&, int64_t);
template PreparedForward<double> PrepareForward<double>(const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, int64_t);
template PreparedBackward<float> PrepareBackward<float>(const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, int64_t, const at::Tensor&,
                                                        const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&);
template PreparedBackward<double> PrepareBackward<double>(const at::Tensor&, const at::Tensor&,
                                                          const at::Tensor&, const at::Tensor&,
                                                          const at::Tensor&, int64_t, const at::Tensor&,
                                                          const at::Tensor&, const at::Tensor&,
                                                          const at::Tensor&);

}  // namespace internal
}  // namespace slimfit::performer
