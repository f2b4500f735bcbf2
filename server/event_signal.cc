#include "server/event_signal.h"

namespace slimfit::server {

void EventSignal::Notify() {
  absl::MutexLock lock(&mutex_);
  ++count_;  // waiters' conditions are evaluated as the lock is released
}

uint64_t EventSignal::WaitAfter(uint64_t seen, absl::Duration timeout) {
  const absl::Time deadline = clock_->Now() + timeout;
  absl::MutexLock lock(&mutex_);
  struct Moved {
    const uint64_t* count;
    uint64_t seen;
    bool Eval() const { return *count != seen; }
  } moved{&count_, seen};
  clock_->AwaitWithDeadline(&mutex_, absl::Condition(&moved, &Moved::Eval), deadline);
  return count_;
}

uint64_t EventSignal::count() const {
  absl::MutexLock lock(&mutex_);
  return count_;
}

}  // namespace slimfit::server
