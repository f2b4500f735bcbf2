#include "performer/emulated_thread_block.h"

#include <thread>
#include <vector>

#include <c10/util/Exception.h>

namespace slimfit::performer {

void RunEmulatedThreadBlock(int64_t count, const std::function<void(const EmulatedThreads&)>& body) {
  TORCH_CHECK(count >= 1 && count <= 1024, "emulated thread block: 1 to 1024 threads, not ", count);
  pthread_barrier_t barrier;
  TORCH_CHECK(pthread_barrier_init(&barrier, nullptr, static_cast<unsigned>(count)) == 0,
              "emulated thread block: cannot make a barrier for ", count, " threads");
  std::vector<std::thread> threads;
  threads.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    threads.emplace_back([&body, i, count, &barrier] { body(EmulatedThreads(i, count, &barrier)); });
  }
  for (std::thread& t : threads) t.join();
  pthread_barrier_destroy(&barrier);
}

}  // namespace slimfit::performer
