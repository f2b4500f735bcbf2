#include "base/clock.h"

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"

namespace slimfit::base {
namespace {

class WallClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu->AwaitWithDeadline(condition, deadline);
  }
  void SleepUntil(absl::Time time) override {
    const absl::Duration left = time - absl::Now();
    if (left > absl::ZeroDuration()) absl::SleepFor(left);
  }
};

}  // namespace

void Clock::SleepUntil(absl::Time time) {
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  static constexpr bool kNever = false;
  AwaitWithDeadline(&mu, absl::Condition(&kNever), time);
}

Clock& RealClock() {
  static WallClock* const clock = new WallClock();
  return *clock;
}

ManualClock::ManualClock(absl::Time start) : now_(start) {}

absl::Time ManualClock::Now() const {
  absl::MutexLock lock(&time_mutex_);
  return now_;
}

bool ManualClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition, absl::Time deadline) {
  Waiter waiter{mu};
  std::list<Waiter*>::iterator registered;
  {
    absl::MutexLock lock(&waiters_mutex_);
    registered = waiters_.insert(waiters_.end(), &waiter);
  }
  // absl::Mutex evaluates a waiter's condition whenever `mu` is released; SetAndWake takes and
  // releases `mu` after moving the time, so a deadline reached wakes this wait.
  struct Ends {
    const absl::Condition* condition;
    const ManualClock* clock;
    absl::Time deadline;
    bool Eval() const { return condition->Eval() || clock->Now() >= deadline; }
  } ends{&condition, this, deadline};
  mu->Await(absl::Condition(&ends, &Ends::Eval));

  waiters_mutex_.Lock();
  waiters_.erase(registered);
  if (waiter.pins > 0) {
    // A SetAndWake is about to take `mu` (or is taking it): let it, before `mu` can go away.
    mu->Unlock();
    waiters_mutex_.Await(absl::Condition(
        +[](Waiter* w) { return w->pins == 0; }, &waiter));
    waiters_mutex_.Unlock();
    mu->Lock();
  } else {
    waiters_mutex_.Unlock();
  }
  return condition.Eval();
}

void ManualClock::Advance(absl::Duration duration) {
  absl::Time target;
  {
    absl::MutexLock lock(&time_mutex_);
    target = now_ + std::max(duration, absl::ZeroDuration());
  }
  SetAndWake(target);
}

void ManualClock::SetTime(absl::Time time) { SetAndWake(time); }

void ManualClock::SetAndWake(absl::Time time) {
  {
    absl::MutexLock lock(&time_mutex_);
    now_ = time;
  }
  std::vector<Waiter*> pinned;
  {
    absl::MutexLock lock(&waiters_mutex_);
    for (Waiter* waiter : waiters_) {
      ++waiter->pins;
      pinned.push_back(waiter);
    }
  }
  for (Waiter* waiter : pinned) {
    waiter->mu->Lock();
    waiter->mu->Unlock();  // re-evaluates the conditions of those waiting with it
  }
  absl::MutexLock lock(&waiters_mutex_);
  for (Waiter* waiter : pinned) --waiter->pins;
}

int ManualClock::waiters() const {
  absl::MutexLock lock(&waiters_mutex_);
  return static_cast<int>(waiters_.size());
}

bool ManualClock::AwaitWaiters(int count, absl::Duration real_timeout) const {
  absl::MutexLock lock(&waiters_mutex_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiters_mutex_) {
    return static_cast<int>(waiters_.size()) >= count;
  };
  return waiters_mutex_.AwaitWithTimeout(absl::Condition(&enough), real_timeout);
}

}  // namespace slimfit::base
