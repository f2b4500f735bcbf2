#include "server/event_signal.h"

namespace slimfit::server {

void EventSignal::Notify() {
  absl::MutexLock lock(&mutex_);
  ++count_;
  changed_.SignalAll();
}

uint64_t EventSignal::WaitAfter(uint64_t seen, absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  const absl::Time deadline = absl::Now() + timeout;
  while (count_ == seen) {
    if (changed_.WaitWithDeadline(&mutex_, deadline)) break;
  }
  return count_;
}

uint64_t EventSignal::count() const {
  absl::MutexLock lock(&mutex_);
  return count_;
}

}  // namespace slimfit::server
