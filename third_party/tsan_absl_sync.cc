// ThreadSanitizer's view of Debian's Abseil synchronization (linked into test binaries only under
// --config=tsan, .bazelrc; scripts/tsan.sh).
//
// Debian's libabsl_synchronization.so is not built with -fsanitize=thread, so its Mutex, CondVar
// and Notification synchronize through futexes and atomics ThreadSanitizer never sees: every access
// guarded by an absl::Mutex would be reported as a race. This file defines the lock, unlock, wait
// and notify entry points in the executable (which the dynamic linker prefers, for calls from our
// objects and, being exported with -rdynamic, from the shared libraries), tells ThreadSanitizer
// what each means — __tsan_acquire(mutex) once a lock is held, __tsan_release(mutex) before it is
// given up, including around the waits that give it up inside Await and CondVar::Wait — and calls
// the library's own function, found with dlsym(RTLD_NEXT). The model is coarser than Abseil's own
// annotations (a reader lock orders readers as a writer lock would), so it can only hide a race
// between two readers, never report one that is not there.
//
// Thread safety: each wrapper is as thread-safe as the function it wraps; the real functions are
// looked up once, under a function-local static's initialization.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

// The library's definition of `symbol` (the next one after this executable's), or abort: a test
// binary that cannot reach Abseil's own functions must not run.
void* Real(const char* symbol) {
  void* function = dlsym(RTLD_NEXT, symbol);
  if (function == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found after the executable: %s\n", symbol, dlerror());
    std::abort();
  }
  return function;
}

template <typename Function>
Function RealAs(const char* symbol) {
  return reinterpret_cast<Function>(Real(symbol));
}

#define SLIMFIT_REAL(type, symbol)                          \
  static const auto real = RealAs<type>(symbol)

using MutexFn = void (*)(absl::Mutex*);
using MutexBoolFn = bool (*)(absl::Mutex*);
using MutexCondFn = void (*)(absl::Mutex*, const absl::Condition*);
using MutexCondDurationFn = bool (*)(absl::Mutex*, const absl::Condition*, absl::Duration);
using MutexCondTimeFn = bool (*)(absl::Mutex*, const absl::Condition*, absl::Time);
using CondVarFn = void (*)(absl::CondVar*, absl::Mutex*);
using CondVarDurationFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Duration);
using CondVarTimeFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Time);
using NotificationFn = void (*)(absl::Notification*);
using ConstNotificationFn = void (*)(const absl::Notification*);
using NotificationDurationFn = bool (*)(const absl::Notification*, absl::Duration);
using NotificationTimeFn = bool (*)(const absl::Notification*, absl::Time);

// Notification keeps its flag right after its mutex (notification.h: `Mutex mutex_;
// std::atomic<bool> notified_yet_;`): the flag's address is where Notify releases and where a wait
// that saw it set acquires.
static_assert(sizeof(absl::Notification) >= sizeof(absl::Mutex) + sizeof(std::atomic<bool>),
              "absl::Notification's layout changed: check the flag's offset below");
const void* NotificationFlag(const absl::Notification* notification) {
  return reinterpret_cast<const char*>(notification) + sizeof(absl::Mutex);
}

// A condition evaluated under `mu` by whichever thread holds it at the time (the waiter itself on
// entry, or a thread unlocking `mu` for it): a critical section of its own, so that what it reads
// is ordered with the writes made under `mu` (the waiter has already released `mu` to ThreadSanitizer
// when the library first evaluates it).
struct GuardedCondition {
  const absl::Condition* condition;
  absl::Mutex* mu;

  static bool Eval(GuardedCondition* guarded) {
    __tsan_acquire(guarded->mu);
    const bool holds = guarded->condition->Eval();
    __tsan_release(guarded->mu);
    return holds;
  }
};

// Abseil's deadlock detection keeps its lock graph under a spin lock of its own, which
// ThreadSanitizer cannot see either (it would report the graph's updates as races): off in these
// binaries, before main. The deadlock detection stays on in every other build.
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

// Wraps `cond` for the library (its evaluations are critical sections of `mutex`) as `guarded`.
#define SLIMFIT_GUARDED(cond, mutex)              \
  GuardedCondition guarded_state{&(cond), (mutex)}; \
  const absl::Condition guarded(&GuardedCondition::Eval, &guarded_state)

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  SLIMFIT_REAL(MutexFn, "_ZN4absl7debian35Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  SLIMFIT_REAL(MutexFn, "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  SLIMFIT_REAL(MutexBoolFn, "_ZN4absl7debian35Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  SLIMFIT_REAL(MutexBoolFn, "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  SLIMFIT_REAL(MutexFn, "_ZN4absl7debian35Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  SLIMFIT_REAL(MutexFn, "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  SLIMFIT_REAL(MutexCondFn, "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  SLIMFIT_GUARDED(cond, this);
  real(this, &guarded);
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  SLIMFIT_REAL(MutexCondFn, "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  SLIMFIT_GUARDED(cond, this);
  real(this, &guarded);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  SLIMFIT_REAL(MutexCondDurationFn, "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  SLIMFIT_GUARDED(cond, this);
  const bool met = real(this, &guarded, timeout);
  __tsan_acquire(this);  // held either way
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  SLIMFIT_REAL(MutexCondTimeFn, "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  SLIMFIT_GUARDED(cond, this);
  const bool met = real(this, &guarded, deadline);
  __tsan_acquire(this);
  return met;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  SLIMFIT_REAL(MutexCondDurationFn,
               "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  SLIMFIT_GUARDED(cond, this);
  const bool met = real(this, &guarded, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  SLIMFIT_REAL(MutexCondTimeFn, "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  SLIMFIT_GUARDED(cond, this);
  const bool met = real(this, &guarded, deadline);
  __tsan_acquire(this);
  return met;
}

// The Await family holds the mutex on entry and on return and may give it up in between.
void Mutex::Await(const Condition& cond) {
  SLIMFIT_REAL(MutexCondFn, "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  SLIMFIT_GUARDED(cond, this);
  __tsan_release(this);
  real(this, &guarded);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  SLIMFIT_REAL(MutexCondDurationFn, "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  SLIMFIT_GUARDED(cond, this);
  __tsan_release(this);
  const bool met = real(this, &guarded, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  SLIMFIT_REAL(MutexCondTimeFn, "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  SLIMFIT_GUARDED(cond, this);
  __tsan_release(this);
  const bool met = real(this, &guarded, deadline);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  SLIMFIT_REAL(CondVarFn, "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  SLIMFIT_REAL(CondVarDurationFn, "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  SLIMFIT_REAL(CondVarTimeFn, "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  SLIMFIT_REAL(NotificationFn, "_ZN4absl7debian312Notification6NotifyEv");
  __tsan_release(const_cast<void*>(NotificationFlag(this)));
  real(this);
}

// HasBeenNotified (inline) reads the flag with an acquiring load in instrumented code, which
// acquires what Notify released at the flag's address; the waits run in the library.
void Notification::WaitForNotification() const {
  SLIMFIT_REAL(ConstNotificationFn, "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<void*>(NotificationFlag(this)));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  SLIMFIT_REAL(NotificationDurationFn, "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<void*>(NotificationFlag(this)));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  SLIMFIT_REAL(NotificationTimeFn, "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<void*>(NotificationFlag(this)));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
