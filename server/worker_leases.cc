#include "server/worker_leases.h"

#include "absl/time/time.h"

namespace slimfit::server {

std::shared_ptr<void> WorkerLeases::Acquire(const std::string& worker_id, const std::atomic<bool>* give_up) {
  absl::MutexLock lock(&mutex_);
  while (held_.count(worker_id) > 0) {
    if (give_up->load()) return nullptr;
    released_.WaitWithTimeout(&mutex_, absl::Milliseconds(100));  // the timeout notices give_up
  }
  held_.insert(worker_id);
  // Non-null (it points at this object, which the deleter does not free): null means gave up.
  return std::shared_ptr<void>(static_cast<void*>(this), [this, worker_id](void*) { Release(worker_id); });
}

void WorkerLeases::Release(const std::string& worker_id) {
  absl::MutexLock lock(&mutex_);
  held_.erase(worker_id);
  released_.SignalAll();
}

}  // namespace slimfit::server
