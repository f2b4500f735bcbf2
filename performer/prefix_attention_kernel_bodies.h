// What one thread block of the fused prefix-sum kernels does (prefix_attention_cuda_kernels.h),
// written once for two executors: the CUDA kernels (prefix_attention_cuda_kernels.cu, compiled by
// nvcc, where `Threads` reads threadIdx and syncs with __syncthreads) and a host emulation of a thread
// block (emulated_thread_block.h: one std::thread per CUDA thread, a barrier for each sync), which
// lets the CPU test suite check the kernels' indexing, block walk and synchronisation against the
// LibTorch form on machines without a GPU.
//
// FrontWithoutBody, last, is a grid-stride loop instead (no shared memory, no sync).
//
// `Threads` provides Index() (this thread's index in the block), Count() (threads in the block) and
// Sync() (every thread of the block waits there; global and shared writes made before it are
// visible after it). Every thread of a block must call a body with the same arguments.
//
// Work split: every loop strides over its output entries by Count(), each entry owned by one thread
// (no atomics); phases that read what another wrote are separated by Sync().
#ifndef SLIMFIT_PERFORMER_PREFIX_ATTENTION_KERNEL_BODIES_H_
#define SLIMFIT_PERFORMER_PREFIX_ATTENTION_KERNEL_BODIES_H_

#include <cstdint>

#include "performer/prefix_attention_cuda_kernels.h"

#if defined(__CUDACC__)
#define SLIMFIT_KERNEL_DEVICE __device__
#define SLIMFIT_KERNEL_HOST_DEVICE __host__ __device__
#else
#define SLIMFIT_KERNEL_DEVICE
#define SLIMFIT_KERNEL_HOST_DEVICE
#endif

namespace slimfit::performer::cuda_kernels {

// Rows of one head: element (i, c) at p[i·row + c].
template <typename T>
struct Head {
  T* p;
  int64_t row;
  SLIMFIT_KERNEL_DEVICE T& operator()(int64_t i, int64_t c) const { return p[i * row + c]; }
};

template <typename T>
SLIMFIT_KERNEL_DEVICE Head<T> HeadOf(const Strided<T>& s, int64_t h) {
  return Head<T>{s.data + h * s.head, s.row};
}

// Rows of a tile in shared memory hold M features padded to M + 1 elements, so that threads
// reading consecutive rows of one column hit different banks.
SLIMFIT_KERNEL_HOST_DEVICE inline int64_t Padded(int64_t features) { return features + 1; }

// The rows a tile holds: a segment shorter than a block needs only its own rows.
SLIMFIT_KERNEL_HOST_DEVICE inline int64_t TileRows(const PrefixShape& s) {
  return s.rows < s.block ? s.rows : s.block;
}

SLIMFIT_KERNEL_HOST_DEVICE inline int64_t BlockCount(const PrefixShape& s) {
  return (s.rows + s.block - 1) / s.block;
}

// Shared memory, in elements: two [tile, M + 1] tiles (φq, φk) and `score_tiles` [tile, tile] ones.
SLIMFIT_KERNEL_HOST_DEVICE inline int64_t SharedElements(const PrefixShape& s, int64_t score_tiles) {
  const int64_t tile = TileRows(s);
  return 2 * tile * Padded(s.features) + score_tiles * tile * tile;
}

// Copies rows [begin, begin + n) of φq and φk into the shared tiles qs, ks ([n, M + 1]).
template <typename T, typename Threads>
SLIMFIT_KERNEL_DEVICE void LoadTiles(const Threads& t, const Head<const T>& q, const Head<const T>& k,
                                     int64_t begin, int64_t n, int64_t m_count, T* qs, T* ks) {
  const int64_t ld = Padded(m_count);
  for (int64_t e = t.Index(); e < n * m_count; e += t.Count()) {
    const int64_t i = e / m_count, m = e % m_count;
    qs[i * ld + m] = q(begin + i, m);
    ks[i * ld + m] = k(begin + i, m);
  }
}

// scores[i, j] = φq_i · φk_j for j ≤ i, else 0 (an n × n tile with leading dimension `tile`).
template <typename T, typename Threads>
SLIMFIT_KERNEL_DEVICE void CausalScores(const Threads& t, const T* qs, const T* ks, int64_t n,
                                        int64_t m_count, int64_t tile, T* scores) {
  const int64_t ld = Padded(m_count);
  for (int64_t e = t.Index(); e < n * n; e += t.Count()) {
    const int64_t i = e / n, j = e % n;
    T acc = 0;
    if (j <= i) {
      for (int64_t m = 0; m < m_count; ++m) acc += qs[i * ld + m] * ks[j * ld + m];
    }
    scores[i * tile + j] = acc;
  }
}

// front_r += Σ_i φk_i ⊗ v_i and front_z += Σ_i φk_i over the tile's n rows (ks in shared memory,
// v rows [begin, begin + n) in global memory). Entry (m, c) belongs to the thread with
// Index() ≡ m·d + c (mod Count()), as in every M × d loop of the bodies.
template <typename T, typename Threads>
SLIMFIT_KERNEL_DEVICE void AddToFront(const Threads& t, const T* ks, const Head<const T>& v, int64_t begin,
                                      int64_t n, int64_t m_count, int64_t d_count, const Head<T>& front_r,
                                      T* front_z, int64_t z_stride) {
  const int64_t ld = Padded(m_count);
  for (int64_t e = t.Index(); e < m_count * d_count; e += t.Count()) {
    const int64_t m = e / d_count, c = e % d_count;
    T acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += ks[i * ld + m] * v(begin + i, c);
    front_r(m, c) += acc;
  }
  for (int64_t m = t.Index(); m < m_count; m += t.Count()) {
    T acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += ks[i * ld + m];
    front_z[m * z_stride] += acc;
  }
}

// Head h's forward. `shared`: SharedElements(a.shape, 1) elements.
template <typename T, typename Threads>
SLIMFIT_KERNEL_DEVICE void PrefixForwardHead(const Threads& t, const PrefixForwardArgs<T>& a, int64_t h,
                                             T* shared) {
  const PrefixShape& s = a.shape;
  const int64_t M = s.features, D = s.dim, tile = TileRows(s), ld = Padded(M);
  T* const qs = shared;              // [tile, M + 1]
  T* const ks = qs + tile * ld;      // [tile, M + 1]
  T* const scores = ks + tile * ld;  // [tile, tile]
  const Head<const T> q = HeadOf(a.q, h), k = HeadOf(a.k, h), v = HeadOf(a.v, h), r0 = HeadOf(a.r0, h);
  const Head<T> num = HeadOf(a.numerator, h), r = HeadOf(a.end_r, h);
  T* const den = a.denominator.data + h * a.denominator.head;
  T* const z = a.end_z.data + h * a.end_z.head;
  const T* const z0 = a.z0.data + h * a.z0.head;

  // The running front lives in the outputs: it starts as the start front.
  for (int64_t e = t.Index(); e < M * D; e += t.Count()) r(e / D, e % D) = r0(e / D, e % D);
  for (int64_t m = t.Index(); m < M; m += t.Count()) z[m * a.end_z.row] = z0[m * a.z0.row];
  t.Sync();

  for (int64_t begin = 0; begin < s.rows; begin += s.block) {
    const int64_t n = s.rows - begin < s.block ? s.rows - begin : s.block;
    LoadTiles(t, q, k, begin, n, M, qs, ks);
    t.Sync();
    CausalScores(t, qs, ks, n, M, tile, scores);
    t.Sync();
    // num_i = φq_i R + Σ_{j ≤ i} A_ij v_j;  den_i = φq_i · z + Σ_{j ≤ i} A_ij (R, z: the block's start).
    for (int64_t e = t.Index(); e < n * D; e += t.Count()) {
      const int64_t i = e / D, c = e % D;
      T acc = 0;
      for (int64_t m = 0; m < M; ++m) acc += qs[i * ld + m] * r(m, c);
      for (int64_t j = 0; j <= i; ++j) acc += scores[i * tile + j] * v(begin + j, c);
      num(begin + i, c) = acc;
    }
    for (int64_t i = t.Index(); i < n; i += t.Count()) {
      T acc = 0;
      for (int64_t m = 0; m < M; ++m) acc += qs[i * ld + m] * z[m * a.end_z.row];
      for (int64_t j = 0; j <= i; ++j) acc += scores[i * tile + j];
      den[(begin + i) * a.denominator.row] = acc;
    }
    t.Sync();
    AddToFront(t, ks, v, begin, n, M, D, r, z, a.end_z.row);
    t.Sync();
  }
}

// Head h's backward. `shared`: SharedElements(a.shape, 2) elements.
template <typename T, typename Threads>
SLIMFIT_KERNEL_DEVICE void PrefixBackwardHead(const Threads& t, const PrefixBackwardArgs<T>& a, int64_t h,
                                              T* shared) {
  const PrefixShape& s = a.shape;
  const int64_t M = s.features, D = s.dim, tile = TileRows(s), ld = Padded(M), blocks = BlockCount(s);
  T* const qs = shared;                      // [tile, M + 1]
  T* const ks = qs + tile * ld;              // [tile, M + 1]
  T* const scores = ks + tile * ld;          // [tile, tile]: A
  T* const g_scores = scores + tile * tile;  // [tile, tile]: dA
  const Head<const T> q = HeadOf(a.q, h), k = HeadOf(a.k, h), v = HeadOf(a.v, h), r0 = HeadOf(a.r0, h);
  const Head<const T> gn = HeadOf(a.grad_numerator, h);
  const T* const gd = a.grad_denominator.data + h * a.grad_denominator.head;
  const int64_t gd_row = a.grad_denominator.row;
  const Head<T> dq = HeadOf(a.grad_q, h), dk = HeadOf(a.grad_k, h), dv = HeadOf(a.grad_v, h);
  // dR, dZ: the gradient of the front after the current block, accumulated in the outputs.
  const Head<T> dr = HeadOf(a.grad_r0, h);
  T* const dz = a.grad_z0.data + h * a.grad_z0.head;
  const int64_t dz_row = a.grad_z0.row;
  const T* const z0 = a.z0.data + h * a.z0.head;
  // Block j ≥ 1's start front in the scratch: [M, d] then [M].
  const int64_t front_size = M * D + M;
  T* const scratch = a.scratch == nullptr ? nullptr : a.scratch + h * (blocks - 1) * front_size;
  auto scratch_r = [&](int64_t j) { return Head<T>{scratch + (j - 1) * front_size, D}; };
  auto scratch_z = [&](int64_t j) { return scratch + (j - 1) * front_size + M * D; };

  {
    const Head<const T> ger = HeadOf(a.grad_end_r, h);
    const T* const gez = a.grad_end_z.data + h * a.grad_end_z.head;
    for (int64_t e = t.Index(); e < M * D; e += t.Count()) dr(e / D, e % D) = ger(e / D, e % D);
    for (int64_t m = t.Index(); m < M; m += t.Count()) dz[m * dz_row] = gez[m * a.grad_end_z.row];
  }
  // Block-start fronts, rebuilt forwards from the start front (exact, no subtraction): block j's is
  // block j − 1's plus that block's rows. Each thread copies the entries it then adds to.
  for (int64_t j = 1; j < blocks; ++j) {
    const Head<T> cur_r = scratch_r(j);
    T* const cur_z = scratch_z(j);
    for (int64_t e = t.Index(); e < M * D; e += t.Count()) {
      const int64_t m = e / D, c = e % D;
      cur_r(m, c) = j == 1 ? r0(m, c) : scratch_r(j - 1)(m, c);
    }
    for (int64_t m = t.Index(); m < M; m += t.Count())
      cur_z[m] = j == 1 ? z0[m * a.z0.row] : scratch_z(j - 1)[m];
    const int64_t begin = (j - 1) * s.block;
    LoadTiles(t, q, k, begin, s.block, M, qs, ks);
    t.Sync();
    AddToFront(t, ks, v, begin, s.block, M, D, cur_r, cur_z, 1);
    t.Sync();
  }

  for (int64_t j = blocks - 1; j >= 0; --j) {
    const int64_t begin = j * s.block;
    const int64_t n = s.rows - begin < s.block ? s.rows - begin : s.block;
    const Head<const T> r = j == 0 ? r0 : Head<const T>{scratch_r(j).p, D};
    const T* const z = j == 0 ? z0 : scratch_z(j);
    const int64_t z_row = j == 0 ? a.z0.row : 1;
    LoadTiles(t, q, k, begin, n, M, qs, ks);
    t.Sync();
    CausalScores(t, qs, ks, n, M, tile, scores);
    // dA_ij = gN_i · v_j + gD_i for j ≤ i, else 0.
    for (int64_t e = t.Index(); e < n * n; e += t.Count()) {
      const int64_t i = e / n, jj = e % n;
      T acc = 0;
      if (jj <= i) {
        for (int64_t c = 0; c < D; ++c) acc += gn(begin + i, c) * v(begin + jj, c);
        acc += gd[(begin + i) * gd_row];
      }
      g_scores[i * tile + jj] = acc;
    }
    t.Sync();
    // dQ_i = gN_i Rᵀ + gD_i z + Σ_{j ≤ i} dA_ij φk_j, and with row i as the key,
    // dK_i = Σ_{i' ≥ i} dA_i'i φq_i' + v_i dRᵀ + dZ.
    for (int64_t e = t.Index(); e < n * M; e += t.Count()) {
      const int64_t i = e / M, m = e % M;
      T acc_q = gd[(begin + i) * gd_row] * z[m * z_row];
      for (int64_t c = 0; c < D; ++c) acc_q += gn(begin + i, c) * r(m, c);
      for (int64_t jj = 0; jj <= i; ++jj) acc_q += g_scores[i * tile + jj] * ks[jj * ld + m];
      dq(begin + i, m) = acc_q;
      T acc_k = dz[m * dz_row];
      for (int64_t c = 0; c < D; ++c) acc_k += v(begin + i, c) * dr(m, c);
      for (int64_t ii = i; ii < n; ++ii) acc_k += g_scores[ii * tile + i] * qs[ii * ld + m];
      dk(begin + i, m) = acc_k;
    }
    // dV_j = Σ_{i ≥ j} A_ij gN_i + φk_j dR.
    for (int64_t e = t.Index(); e < n * D; e += t.Count()) {
      const int64_t jj = e / D, c = e % D;
      T acc = 0;
      for (int64_t i = jj; i < n; ++i) acc += scores[i * tile + jj] * gn(begin + i, c);
      for (int64_t m = 0; m < M; ++m) acc += ks[jj * ld + m] * dr(m, c);
      dv(begin + jj, c) = acc;
    }
    t.Sync();
    // The gradient of the block's start front: dR += φqᵀ gN, dZ += φqᵀ gD.
    for (int64_t e = t.Index(); e < M * D; e += t.Count()) {
      const int64_t m = e / D, c = e % D;
      T acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += qs[i * ld + m] * gn(begin + i, c);
      dr(m, c) += acc;
    }
    for (int64_t m = t.Index(); m < M; m += t.Count()) {
      T acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += qs[i * ld + m] * gd[(begin + i) * gd_row];
      dz[m * dz_row] += acc;
    }
    t.Sync();
  }
}

// FrontWithout as a grid-stride loop (`Grid`: Index() among all the launch's threads, Count()):
// entries of r first, then those of z.
template <typename T, typename Grid>
SLIMFIT_KERNEL_DEVICE void FrontWithoutBody(const Grid& g, const FrontWithoutArgs<T>& a) {
  const PrefixShape& s = a.shape;
  const int64_t M = s.features, D = s.dim, r_size = s.heads * M * D;
  for (int64_t e = g.Index(); e < r_size + s.heads * M; e += g.Count()) {
    if (e < r_size) {
      const int64_t h = e / (M * D), m = (e / D) % M, c = e % D;
      const Head<const T> k = HeadOf(a.k, h), v = HeadOf(a.v, h), after = HeadOf(a.after_r, h);
      T acc = 0;
      for (int64_t i = 0; i < s.rows; ++i) acc += k(i, m) * v(i, c);
      a.r[e] = after(m, c) - acc;
    } else {
      const int64_t f = e - r_size, h = f / M, m = f % M;
      const Head<const T> k = HeadOf(a.k, h);
      T acc = 0;
      for (int64_t i = 0; i < s.rows; ++i) acc += k(i, m);
      a.z[f] = a.after_z.data[h * a.after_z.head + m * a.after_z.row] - acc;
    }
  }
}

}  // namespace slimfit::performer::cuda_kernels

#endif  // SLIMFIT_PERFORMER_PREFIX_ATTENTION_KERNEL_BODIES_H_
