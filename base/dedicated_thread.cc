#include "base/dedicated_thread.h"

#include "base/log.h"

namespace slimfit::base {

DedicatedThread::DedicatedThread() : thread_("dedicated", [this] { return Loop(); }) {}

DedicatedThread::~DedicatedThread() {
  {
    absl::MutexLock callers(&callers_);  // after the Run in progress, if any
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (absl::Status ended = thread_.Join(); !ended.ok()) LogError(ended.message());
}

void DedicatedThread::Run(absl::FunctionRef<void()> work) {
  absl::MutexLock callers(&callers_);
  absl::MutexLock lock(&mutex_);
  work_ = &work;
  done_ = false;
  mutex_.Await(absl::Condition(&done_));
  work_ = nullptr;
}

absl::Status DedicatedThread::Loop() {
  absl::MutexLock lock(&mutex_);
  while (true) {
    mutex_.Await(absl::Condition(
        +[](DedicatedThread* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mutex_) {
          return self->stopping_ || (self->work_ != nullptr && !self->done_);
        },
        this));
    if (stopping_) return absl::OkStatus();
    absl::FunctionRef<void()> work = *work_;
    mutex_.Unlock();
    // What the callable throws must not end the thread (its caller would wait for good).
    const absl::Status ran = CatchExceptions("a callable on a dedicated thread", [work] {
      work();
      return absl::OkStatus();
    });
    if (!ran.ok()) LogError(ran.message());
    mutex_.Lock();
    done_ = true;
  }
}

}  // namespace slimfit::base
