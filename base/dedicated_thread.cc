#include "base/dedicated_thread.h"

namespace slimfit::base {

DedicatedThread::DedicatedThread() : thread_([this] { Loop(); }) {}

DedicatedThread::~DedicatedThread() {
  {
    absl::MutexLock callers(&callers_);  // after the Run in progress, if any
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  thread_.join();
}

void DedicatedThread::Run(absl::FunctionRef<void()> work) {
  absl::MutexLock callers(&callers_);
  absl::MutexLock lock(&mutex_);
  work_ = &work;
  done_ = false;
  mutex_.Await(absl::Condition(&done_));
  work_ = nullptr;
}

void DedicatedThread::Loop() {
  absl::MutexLock lock(&mutex_);
  while (true) {
    mutex_.Await(absl::Condition(
        +[](DedicatedThread* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mutex_) {
          return self->stopping_ || (self->work_ != nullptr && !self->done_);
        },
        this));
    if (stopping_) return;
    absl::FunctionRef<void()> work = *work_;
    mutex_.Unlock();
    work();
    mutex_.Lock();
    done_ = true;
  }
}

}  // namespace slimfit::base
