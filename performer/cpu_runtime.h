// Process-wide CPU runtime settings that decide how fast LibTorch runs on a CPU box.
//
// Debian's LibTorch hands matrix products to OpenBLAS, which keeps its own thread pool next to
// LibTorch's OpenMP intra-op pool. With both pools at N threads on N cores they spin against each
// other: on the 2-core reference machine a C = 16 gradient took 6.6 s instead of 1.2 s (see
// BENCHMARKS.md). So ConfigureCpuThreads gives the N threads to the one pool that runs the matrix
// products and leaves the other at one thread:
//  - float32 in a build with oneDNN (matrix_products.h): the OpenMP pool, which oneDNN's sgemm and
//    LibTorch's element-wise kernels share; OpenBLAS (LibTorch's batched products) runs on the
//    calling thread;
//  - otherwise: OpenBLAS, where the FLOPs are; LibTorch's element-wise kernels run on the calling
//    thread.
//
// Thread safety: call from main() before work starts; the settings are process-wide.
#ifndef SLIMFIT_PERFORMER_CPU_RUNTIME_H_
#define SLIMFIT_PERFORMER_CPU_RUNTIME_H_

#include <c10/core/ScalarType.h>

#include <string>

#include "absl/status/status.h"

namespace slimfit::performer {

// `products` is the dtype of the matrix products that will run (kFloat or kDouble).
// REQUIRES: threads >= 1. INVALID_ARGUMENT otherwise. Idempotent.
absl::Status ConfigureCpuThreads(int threads, at::ScalarType products = at::kFloat);

// Threads the BLAS library is using, or -1 when it cannot be queried; for reports.
int BlasThreads();

// "openblas" when OpenBLAS's thread controls were found, "unknown" otherwise; for reports.
std::string BlasName();

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_CPU_RUNTIME_H_
