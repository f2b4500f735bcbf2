// Wakes whoever waits for news on the coordinator: WatchJob streams when any job publishes an event,
// job runners waiting for workers when the registry changes. A counter and a condition: a waiter
// remembers the count it saw and waits until it moves.
//
// Thread safety: thread-safe.
#ifndef SLIMFIT_SERVER_EVENT_SIGNAL_H_
#define SLIMFIT_SERVER_EVENT_SIGNAL_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace slimfit::server {

class EventSignal {
 public:
  // `clock` (not owned; outlives the signal) measures WaitAfter's timeout.
  explicit EventSignal(base::Clock* clock = &base::RealClock()) : clock_(clock) {}

  void Notify();
  // Waits until Notify() after `seen` or until `timeout` on the clock; returns the current count.
  uint64_t WaitAfter(uint64_t seen, absl::Duration timeout);
  uint64_t count() const;

 private:
  base::Clock* const clock_;
  mutable absl::Mutex mutex_;
  uint64_t count_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_EVENT_SIGNAL_H_
