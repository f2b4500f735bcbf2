// How a daemon's large allocations go back to the system. glibc's malloc serves blocks above a
// threshold with their own mappings, returned to the system when freed, but raises that threshold
// to the size of each such block freed (up to 32 MiB): after a few rounds, tensors of tens of MiB
// come from the heap and a freed one stays in the process, so the coordinator's resident memory
// grew to ~12× its model's parameter bytes where its tensors needed ~8× (BENCHMARKS.md, "Where do a
// 100M model's round time and coordinator memory go?"). Fixing the threshold keeps every large block a
// mapping of its own, at the price of page faults when such a block is allocated again (so the coordinator
// reuses its largest buffers across rounds). slimfit-coordinator sets it; slimfit-worker does not: its engine
// allocates and frees slice after slice, where reusing the heap is what keeps it fast, and its
// budget is kept by the memory tracker's count of tensor bytes.
//
// Thread safety: call once, at start-up, before other threads allocate.
#ifndef SLIMFIT_BASE_PROCESS_MEMORY_H_
#define SLIMFIT_BASE_PROCESS_MEMORY_H_

#include <cstddef>
#include <cstdint>

namespace slimfit::base {

// Blocks of at least `threshold_bytes` get mappings of their own, unmapped when freed. True when
// the C library took the setting (glibc); false elsewhere (nothing changes).
bool ReturnLargeBlocksToTheSystem(size_t threshold_bytes = size_t{2} << 20);

// The engine's opposite trade (slimfit-worker, calibration, benchmarks): freed blocks of any size
// stay in the heap instead of going back to the kernel — glibc would otherwise map and fault in
// fresh pages for each slice's activations (a 25% slower full gradient here). Resident memory
// then stays at its high-water mark, which a worker with a budget holds anyway — per malloc arena,
// that is per thread: slimfit-worker runs every shard on one thread of its own
// (base/dedicated_thread.h) so that its shards share one high-water mark. Idempotent.
void RetainFreedHeapMemory();

// The process's resident memory in bytes (/proc/self/statm); 0 when it cannot be read.
int64_t ResidentBytes();

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_PROCESS_MEMORY_H_
