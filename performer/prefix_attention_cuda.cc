#include "performer/prefix_attention_cuda.h"

#include <atomic>

#include <c10/util/Exception.h>

#if defined(SLIMFIT_WITH_CUDA_KERNELS)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace slimfit::performer {
namespace {

void CheckShapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& r0,
                 const at::Tensor& z0, int64_t block) {
  TORCH_CHECK(block >= 1, "fused CUDA prefix sums: block must be at least 1, got ", block);
  TORCH_CHECK(q.dim() == 3 && k.sizes() == q.sizes() && v.dim() == 3 && v.size(0) == q.size(0) &&
                  v.size(1) == q.size(1) && q.size(0) >= 1 && q.size(1) >= 1 && q.size(2) >= 1 && v.size(2) >= 1,
              "fused CUDA prefix sums: φq ", q.sizes(), ", φk ", k.sizes(), " and v ", v.sizes(), " do not match");
  TORCH_CHECK(r0.sizes() == at::IntArrayRef({q.size(0), q.size(2), v.size(2)}) &&
                  z0.sizes() == at::IntArrayRef({q.size(0), q.size(2)}),
              "fused CUDA prefix sums: front ", r0.sizes(), " / ", z0.sizes(), " does not match φq ", q.sizes(),
              " and v ", v.sizes());
}

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

#if defined(SLIMFIT_WITH_CUDA_KERNELS)
bool OneFloatDevice(std::initializer_list<const at::Tensor*> tensors) {
  const at::Tensor& first = **tensors.begin();
  if (!first.is_cuda() || (first.scalar_type() != at::kFloat && first.scalar_type() != at::kDouble)) return false;
  for (const at::Tensor* t : tensors) {
    if (!t->defined() || t->device() != first.device() || t->scalar_type() != first.scalar_type()) return false;
  }
  return true;
}

// The device's opt-in shared memory per thread block, asked once per device (−1: unknown).
int64_t SharedBytesAllowed(c10::DeviceIndex device) {
  constexpr int kDevices = 64;
  static std::atomic<int64_t> cache[kDevices];  // 0: not asked yet, else the answer + 2
  if (device < 0 || device >= kDevices) return cuda_kernels::MaxSharedBytesOptIn(device);
  int64_t entry = cache[device].load(std::memory_order_relaxed);
  if (entry == 0) {
    entry = cuda_kernels::MaxSharedBytesOptIn(device) + 2;
    cache[device].store(entry, std::memory_order_relaxed);
  }
  return entry - 2;
}

CUstream_st* CurrentStream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

void CheckLaunch(const char* error, const char* what) {
  TORCH_CHECK(error == nullptr, "fused CUDA prefix sums: the ", what, " kernel did not launch: ", error);
}
#endif

}  // namespace

bool FusedCudaPrefixApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& r0,
                            const at::Tensor& z0, int64_t block) {
#if defined(SLIMFIT_WITH_CUDA_KERNELS)
  if (!FusedCudaKernelsEnabled() || block < 1 || !OneFloatDevice({&q, &k, &v, &r0, &z0})) return false;
  if (q.dim() != 3 || k.sizes() != q.sizes() || v.dim() != 3 || v.size(0) != q.size(0) || v.size(1) != q.size(1) ||
      q.numel() == 0 || v.numel() == 0 || r0.sizes() != at::IntArrayRef({q.size(0), q.size(2), v.size(2)}) ||
      z0.sizes() != at::IntArrayRef({q.size(0), q.size(2)})) {
    return false;
  }
  if (q.size(1) > kFusedCudaMaxBlocks * block) return false;
  const cuda_kernels::PrefixShape shape = ShapeOf(q, v, block);
  const size_t bytes = cuda_kernels::PrefixBackwardSharedBytes(shape, q.element_size());  // the larger
  const int64_t allowed = SharedBytesAllowed(q.device().index());
  return allowed >= 0 && bytes <= static_cast<size_t>(allowed);
#else
  (void)q, (void)k, (void)v, (void)r0, (void)z0, (void)block;
  return false;
#endif
}

FusedPrefixForward FusedPrefixForwardCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
#if defined(SLIMFIT_WITH_CUDA_KERNELS)
  TORCH_CHECK(FusedCudaPrefixApplies(q, k, v, r0, z0, block), "fused CUDA prefix sums: these tensors are not theirs");
  const c10::cuda::CUDAGuard guard(q.device());
  if (q.scalar_type() == at::kFloat) {
    internal::PreparedForward<float> p = internal::PrepareForward<float>(q, k, v, r0, z0, block);
    CheckLaunch(cuda_kernels::LaunchPrefixForward(p.args, CurrentStream(q)), "forward");
    return p.out;
  }
  internal::PreparedForward<double> p = internal::PrepareForward<double>(q, k, v, r0, z0, block);
  CheckLaunch(cuda_kernels::LaunchPrefixForward(p.args, CurrentStream(q)), "forward");
  return p.out;
#else
  (void)q, (void)k, (void)v, (void)r0, (void)z0, (void)block;
  TORCH_CHECK(false, "fused CUDA prefix sums: this build has no CUDA kernels");
#endif
}

FusedPrefixGradients FusedPrefixBackwardCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& r0, const at::Tensor& z0, int64_t block,
                                             const at::Tensor& grad_numerator, const at::Tensor& grad_denominator,
                                             const at::Tensor& grad_end_numerator,
                                             const at::Tensor& grad_end_denominator) {
#if defined(SLIMFIT_WITH_CUDA_KERNELS)
  TORCH_CHECK(FusedCudaPrefixApplies(q, k, v, r0, z0, block) &&
                  OneFloatDevice({&q, &grad_numerator, &grad_denominator, &grad_end_numerator, &grad_end_denominator}),
              "fused CUDA prefix sums: these tensors are not theirs");
  const c10::cuda::CUDAGuard guard(q.device());
  if (q.scalar_type() == at::kFloat) {
    internal::PreparedBackward<float> p = internal::PrepareBackward<float>(
        q, k, v, r0, z0, block, grad_numerator, grad_denominator, grad_end_numerator, grad_end_denominator);
    CheckLaunch(cuda_kernels::LaunchPrefixBackward(p.args, CurrentStream(q)), "backward");
    return p.out;
  }
  internal::PreparedBackward<double> p = internal::PrepareBackward<double>(
      q, k, v, r0, z0, block, grad_numerator, grad_denominator, grad_end_numerator, grad_end_denominator);
  CheckLaunch(cuda_kernels::LaunchPrefixBackward(p.args, CurrentStream(q)), "backward");
  return p.out;
#else
  (void)q, (void)k, (void)v, (void)r0, (void)z0, (void)block, (void)grad_numerator, (void)grad_denominator,
      (void)grad_end_numerator, (void)grad_end_denominator;
  TORCH_CHECK(false, "fused CUDA prefix sums: this build has no CUDA kernels");
#endif
}

bool FusedCudaFrontWithoutApplies(const at::Tensor& after_numerator, const at::Tensor& after_denominator,
                                  const at::Tensor& k, const at::Tensor& v) {
#if defined(SLIMFIT_WITH_CUDA_KERNELS)
  return FusedCudaKernelsEnabled() && OneFloatDevice({&k, &v, &after_numerator, &after_denominator}) &&
         k.dim() == 3 && v.dim() == 3 && v.size(0) == k.size(0) && v.size(1) == k.size(1) &&
         after_numerator.sizes() == at::IntArrayRef({k.size(0), k.size(2), v.size(2)}) &&
         after_denominator.sizes() == at::IntArrayRef({k.size(0), k.size(2)});
#else
  (void)after_numerator, (void)after_denominator, (void)k, (void)v;
  return false;
#endif
}

FusedFront FusedFrontWithoutCuda(const at::Tensor& after_numerator, const at::Tensor& after_denominator,
                                 const at::Tensor& k, const at::Tensor& v) {
#if defined(SLIMFIT_WITH_CUDA_KERNELS)
  TORCH_CHECK(FusedCudaFrontWithoutApplies(after_numerator, after_denominator, k, v),
              "fused CUDA front: these tensors are not its");
  const c10::cuda::CUDAGuard guard(k.device());
  if (k.scalar_type() == at::kFloat) {
    internal::PreparedFrontWithout<float> p =
        internal::PrepareFrontWithout<float>(after_numerator, after_denominator, k, v);
    CheckLaunch(cuda_kernels::LaunchFrontWithout(p.args, CurrentStream(k)), "front");
    return p.out;
  }
  internal::PreparedFrontWithout<double> p =
      internal::PrepareFrontWithout<double>(after_numerator, after_denominator, k, v);
  CheckLaunch(cuda_kernels::LaunchFrontWithout(p.args, CurrentStream(k)), "front");
  return p.out;
#else
  (void)after_numerator, (void)after_denominator, (void)k, (void)v;
  TORCH_CHECK(false, "fused CUDA front: this build has no CUDA kernels");
#endif
}

namespace internal {

template <typename T>
PreparedForward<T> PrepareForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& r0, const at::Tensor& z0, int64_t block) {
  CheckShapes(q, k, v, r0, z0, block);
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
                                    const at::Tensor& grad_end_numerator, const at::Tensor& grad_end_denominator) {
  CheckShapes(q, k, v, r0, z0, block);
  TORCH_CHECK(grad_numerator.sizes() == v.sizes() && grad_denominator.sizes() == q.sizes().slice(0, 2) &&
                  grad_end_numerator.sizes() == r0.sizes() && grad_end_denominator.sizes() == z0.sizes(),
              "fused CUDA prefix sums: the output gradients must have the outputs' shapes");
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
PreparedFrontWithout<T> PrepareFrontWithout(const at::Tensor& after_numerator, const at::Tensor& after_denominator,
                                            const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(k.dim() == 3 && v.dim() == 3 && v.size(0) == k.size(0) && v.size(1) == k.size(1) &&
                  after_numerator.sizes() == at::IntArrayRef({k.size(0), k.size(2), v.size(2)}) &&
                  after_denominator.sizes() == at::IntArrayRef({k.size(0), k.size(2)}),
              "fused CUDA front: φk ", k.sizes(), ", v ", v.sizes(), " and front ", after_numerator.sizes(), " / ",
              after_denominator.sizes(), " do not match");
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
template PreparedForward<double> PrepareForward<double>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, const at::Tensor&, int64_t);
template PreparedBackward<float> PrepareBackward<float>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, const at::Tensor&, int64_t,
                                                        const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&);
template PreparedBackward<double> PrepareBackward<double>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                          const at::Tensor&, const at::Tensor&, int64_t,
                                                          const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                          const at::Tensor&);

}  // namespace internal
}  // namespace slimfit::performer
