// Clock: where the coordinator reads the time and waits for it, so that tests can drive time by
// hand. Everything time-dependent in a component (a call's deadline, a worker's heartbeat expiry,
// a round's time budget, an event's timestamp) reads Now() of the Clock it was given, and every
// wait that ends at a time ("until this condition holds or the deadline passes") goes through
// AwaitWithDeadline, so a ManualClock that a test advances ends it deterministically, with no
// sleep and no real time passing.
//
// Example:
//   absl::MutexLock lock(&mutex_);
//   const absl::Time deadline = clock_->Now() + timeout;
//   if (!clock_->AwaitWithDeadline(&mutex_, absl::Condition(&done_), deadline)) {
//     return absl::DeadlineExceededError(...);
//   }
//
//   // In a test:
//   base::ManualClock clock;
//   std::thread waiter(...);       // blocks in clock.AwaitWithDeadline
//   clock.AwaitWaiters(1);         // until it really waits (no sleep)
//   clock.Advance(timeout);        // its deadline has passed: it returns false
//
// What the clock does not cover: deadlines that another system enforces in real time (a gRPC
// ClientContext's deadline) — a component that must honour a Clock's deadline for such a call
// also checks it itself.
//
// Thread safety: every Clock is safe for concurrent use; RealClock() lives for the whole program.
#ifndef SLIMFIT_BASE_CLOCK_H_
#define SLIMFIT_BASE_CLOCK_H_

#include <list>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace slimfit::base {

class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // Like absl::Mutex::AwaitWithDeadline, with `deadline` on this clock: waits until `condition`
  // holds or Now() >= deadline, whichever comes first, and returns whether `condition` holds.
  // REQUIRES: `mu` held by the caller (it is released while waiting and held again on return);
  // `condition` reads only state guarded by `mu` (and this clock). absl::InfiniteFuture() waits for
  // the condition alone.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // Blocks until Now() >= `time`.
  virtual void SleepUntil(absl::Time time);
  void SleepFor(absl::Duration duration) { SleepUntil(Now() + duration); }
};

// The wall clock (absl::Now, absl::Mutex's real-time waits): what the daemons use.
Clock& RealClock();

// A clock that moves only when told: Advance and SetTime. Waiters whose deadline the new time
// reaches are woken by the call that moves it (after it returns they have been told; whether they
// have run yet is up to the scheduler — AwaitWaiters tells a test when a thread waits again).
//
// Thread safety: thread-safe. REQUIRES of Advance and SetTime: the caller holds no mutex that a
// thread waits with in AwaitWithDeadline (the waiters' mutexes are taken briefly to wake them).
class ManualClock final : public Clock {
 public:
  // Starts at `start` (by default a fixed, realistic date, so timestamps look like timestamps).
  explicit ManualClock(absl::Time start = absl::FromUnixSeconds(1700000000));
  ManualClock(const ManualClock&) = delete;
  ManualClock& operator=(const ManualClock&) = delete;
  // REQUIRES: no thread waits on this clock.
  ~ManualClock() override = default;

  absl::Time Now() const override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Moves the time forward by `duration` (a negative duration is treated as zero: time never goes
  // backwards through Advance) and wakes the waiters.
  void Advance(absl::Duration duration);
  // Sets the time, forwards or backwards (a test of a clock that jumps), and wakes the waiters.
  void SetTime(absl::Time time);

  // Threads blocked in AwaitWithDeadline or SleepUntil right now.
  int waiters() const;
  // Blocks until at least `count` threads wait on this clock or `real_timeout` of real time passed
  // (a safety net for a test that went wrong: it fails instead of hanging); whether they do.
  bool AwaitWaiters(int count, absl::Duration real_timeout = absl::Seconds(60)) const;

 private:
  // A thread in AwaitWithDeadline: the mutex it waits with, and how many Wake calls are about to
  // take it (the waiter stays until none is, so that its mutex outlives their use of it).
  struct Waiter {
    absl::Mutex* mu;
    int pins = 0;
  };
  void SetAndWake(absl::Time time);

  mutable absl::Mutex time_mutex_;  // taken inside waiters' conditions: never held while taking another
  absl::Time now_ ABSL_GUARDED_BY(time_mutex_);

  mutable absl::Mutex waiters_mutex_;  // taken with a waiter's mutex held: never held while taking one
  std::list<Waiter*> waiters_ ABSL_GUARDED_BY(waiters_mutex_);
};

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_CLOCK_H_
