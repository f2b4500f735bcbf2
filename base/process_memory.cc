#include "base/process_memory.h"

#include <unistd.h>

#include <fstream>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace slimfit::base {

bool ReturnLargeBlocksToTheSystem(size_t threshold_bytes) {
#if defined(__GLIBC__)
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(threshold_bytes)) == 1;
#else
  (void)threshold_bytes;
  return false;
#endif
}

void RetainFreedHeapMemory() {
#if defined(__GLIBC__)
  constexpr int kLargest = 1 << 30;  // larger than any block the engine allocates
  mallopt(M_MMAP_THRESHOLD, kLargest);
  mallopt(M_TRIM_THRESHOLD, kLargest);
#endif
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace slimfit::base
