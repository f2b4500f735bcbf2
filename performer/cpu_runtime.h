// Process-wide CPU runtime settings that decide how fast LibTorch runs on a CPU box.
//
// Debian's LibTorch hands matrix products to OpenBLAS, which keeps its own thread pool next to
// LibTorch's OpenMP intra-op pool. With both pools at N threads on N cores they spin against each
// other: on the 2-core reference machine a C = 16 gradient took 6.6 s instead of 1.2 s (see
// BENCHMARKS.md). ConfigureCpuThreads gives the N threads to OpenBLAS, where the FLOPs are, and
// runs LibTorch's element-wise kernels on the calling thread.
//
// Thread safety: call from main() before work starts; the settings are process-wide.
#ifndef SLIMFIT_PERFORMER_CPU_RUNTIME_H_
#define SLIMFIT_PERFORMER_CPU_RUNTIME_H_

#include <string>

#include "absl/status/status.h"

namespace slimfit::performer {

// REQUIRES: threads >= 1. INVALID_ARGUMENT otherwise. Idempotent.
absl::Status ConfigureCpuThreads(int threads);

// Keeps freed tensor memory in the heap instead of returning every large block to the kernel
// (glibc would otherwise mmap and fault in fresh pages for each activation: a 25% slower full
// gradient here). Resident memory then stays at its high-water mark, which a worker with a
// budget holds anyway. Idempotent.
void RetainFreedHeapMemory();

// Threads the BLAS library is using, or -1 when it cannot be queried; for reports.
int BlasThreads();

// "openblas" when OpenBLAS's thread controls were found, "unknown" otherwise; for reports.
std::string BlasName();

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_CPU_RUNTIME_H_
