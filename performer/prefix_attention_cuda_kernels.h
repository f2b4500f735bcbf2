// The chunked causal prefix sums of a short segment (a few blocks: a small slice) as one CUDA
// kernel per direction, over raw device buffers. This header is plain C++ (no CUDA headers), so the
// host code that calls it compiles in every build; the definitions are in
// prefix_attention_cuda_kernels.cu, compiled only by the CUDA build (scripts/cuda/CMakeLists.txt).
// prefix_attention_cuda.h is the ATen-facing wrapper; call that, not these.
//
// Why: on a GPU a config-A slice of 16 tokens makes ~90 of its ~180 kernel launches in the prefix
// sums (the block form of prefix_attention.cc: a dozen batched products, masks and sums per block
// and layer, forwards and backwards) and each costs ~3 µs replayed on an H100, far more than its
// arithmetic. These kernels do a segment's whole forward, or whole backward, in one launch.
//
// Arithmetic: the equations of prefix_attention.cc's ChunkedPrefixFunction, block by block in the
// same order (block-start fronts rebuilt forwards from the start front, never by subtraction);
// sums within a block are taken in another order than cuBLAS's, so results equal the LibTorch form
// to rounding. One thread block per head; within it the block's φq and φk rows and its score
// matrices live in shared memory, the fronts and their gradients in the output buffers.
//
// Thread safety: launches are asynchronous on the given stream; the buffers must stay alive and
// unwritten by others until the stream reaches them (ATen's caching allocator does that for tensors
// allocated on the stream).
#ifndef SLIMFIT_PERFORMER_PREFIX_ATTENTION_CUDA_KERNELS_H_
#define SLIMFIT_PERFORMER_PREFIX_ATTENTION_CUDA_KERNELS_H_

#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace slimfit::performer::cuda_kernels {

// A [heads, rows, width] (or [heads, rows]) buffer: element (h, i, c) at data[h·head + i·row + c].
// The innermost stride is 1.
template <typename T>
struct Strided {
  T* data = nullptr;
  int64_t head = 0;
  int64_t row = 0;
};

// heads × rows of φq, φk (M features) and v (d values); blocks of `block` rows.
struct PrefixShape {
  int64_t heads = 0, rows = 0, features = 0, dim = 0, block = 0;
  int64_t Blocks() const { return (rows + block - 1) / block; }
};

template <typename T>
struct PrefixForwardArgs {
  PrefixShape shape;
  Strided<const T> q, k, v;           // [heads, rows, M], [heads, rows, M], [heads, rows, d]
  Strided<const T> r0, z0;            // the start front: [heads, M, d], [heads, M]
  Strided<T> numerator, denominator;  // [heads, rows, d], [heads, rows]
  Strided<T> end_r, end_z;            // the front after the last row: [heads, M, d], [heads, M]
};

template <typename T>
struct PrefixBackwardArgs {
  PrefixShape shape;
  Strided<const T> q, k, v, r0, z0;                   // as the forward's
  Strided<const T> grad_numerator, grad_denominator;  // [heads, rows, d], [heads, rows]
  Strided<const T> grad_end_r, grad_end_z;            // [heads, M, d], [heads, M]
  Strided<T> grad_q, grad_k, grad_v;                  // [heads, rows, M], [heads, rows, M], [heads, rows, d]
  Strided<T> grad_r0, grad_z0;                        // [heads, M, d], [heads, M]
  // The block-start fronts of blocks 1 … Blocks()−1: heads × (Blocks()−1) × (M·d + M) elements,
  // contiguous; null when there is one block.
  T* scratch = nullptr;
};

// The front before a stretch without document starts from the one after it (prefix_attention.h's
// FrontWithout): r = after_r − Σ_i φk_i ⊗ v_i, z = after_z − Σ_i φk_i. A grid-stride kernel, one
// thread per output entry.
template <typename T>
struct FrontWithoutArgs {
  PrefixShape shape;                  // block unused
  Strided<const T> k, v;              // [heads, rows, M], [heads, rows, d]
  Strided<const T> after_r, after_z;  // [heads, M, d], [heads, M]
  T* r = nullptr;                     // [heads, M, d], contiguous
  T* z = nullptr;                     // [heads, M], contiguous
};

// The most dynamic shared memory a thread block may use on `device` once opted in, or −1 when the
// CUDA runtime cannot say (no device, no driver).
int64_t MaxSharedBytesOptIn(int device);

// Enqueue the kernels on `stream` (of the current device). Return null when the launch was
// accepted, else the CUDA runtime's error text. REQUIRES: shapes ≥ 1; the shared memory a thread
// block needs (prefix_attention_kernel_bodies.h's SharedElements: one score tile forwards, two
// backwards) within MaxSharedBytesOptIn; T is float or double.
template <typename T>
const char* LaunchPrefixForward(const PrefixForwardArgs<T>& args, CUstream_st* stream);
template <typename T>
const char* LaunchPrefixBackward(const PrefixBackwardArgs<T>& args, CUstream_st* stream);
template <typename T>
const char* LaunchFrontWithout(const FrontWithoutArgs<T>& args, CUstream_st* stream);

}  // namespace slimfit::performer::cuda_kernels

#endif  // SLIMFIT_PERFORMER_PREFIX_ATTENTION_CUDA_KERNELS_H_
