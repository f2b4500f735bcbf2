#include "base/thread.h"

#include <pthread.h>

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace slimfit::base {

absl::Status CatchExceptions(absl::string_view what, absl::FunctionRef<absl::Status()> body) {
  try {
    return body();
  } catch (const std::exception& e) {
    const absl::string_view message = e.what();
    return absl::InternalError(
        absl::StrCat(what, ": uncaught exception: ", message.substr(0, message.find('\n'))));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": uncaught exception (not a std::exception)"));
  }
}

struct Thread::State {
  std::string name;
  mutable absl::Mutex mutex;
  bool done ABSL_GUARDED_BY(mutex) = false;
  bool joined ABSL_GUARDED_BY(mutex) = false;
  absl::Status status ABSL_GUARDED_BY(mutex);
  std::thread::id id ABSL_GUARDED_BY(mutex);
  absl::Mutex join_mutex ABSL_ACQUIRED_BEFORE(mutex);  // one join at a time
  std::thread thread ABSL_GUARDED_BY(join_mutex);
};

Thread::Thread(std::string name, std::function<absl::Status()> body, OnEnd on_end)
    : state_(std::make_shared<State>()) {
  state_->name = std::move(name);
  State* state = state_.get();  // outlives the thread: every owner joins it first
  absl::MutexLock join_lock(&state->join_mutex);
  state->thread = std::thread([state, body = std::move(body), on_end = std::move(on_end)] {
    // Linux keeps 15 bytes of a thread's name; a longer one would be refused whole.
    (void)pthread_setname_np(pthread_self(), state->name.substr(0, 15).c_str());
    absl::Status status = CatchExceptions(absl::StrCat("thread ", state->name), body);
    {
      absl::MutexLock lock(&state->mutex);
      state->status = status;
      state->done = true;
    }
    if (on_end) on_end(status);
  });
  absl::MutexLock lock(&state->mutex);
  state->id = state->thread.get_id();
}

Thread::~Thread() {
  if (!joinable()) return;
  if (absl::Status status = Join(); !status.ok()) {
    LogError("thread ", state_->name, " ended unjoined: ", status.message());
  }
}

Thread& Thread::operator=(Thread&& other) noexcept {
  if (this != &other) {
    if (joinable()) {
      if (absl::Status status = Join(); !status.ok()) {
        LogError("thread ", state_->name, " ended unjoined: ", status.message());
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

absl::Status Thread::Join() {
  if (state_ == nullptr) return absl::FailedPreconditionError("Join: no thread was started");
  absl::MutexLock join_lock(&state_->join_mutex);
  if (state_->thread.joinable()) state_->thread.join();
  absl::MutexLock lock(&state_->mutex);
  state_->joined = true;
  return state_->status;
}

bool Thread::done() const {
  if (state_ == nullptr) return false;
  absl::MutexLock lock(&state_->mutex);
  return state_->done;
}

bool Thread::WaitUntilDone(absl::Time deadline) const {
  if (state_ == nullptr) return false;
  absl::MutexLock lock(&state_->mutex);
  return state_->mutex.AwaitWithDeadline(absl::Condition(&state_->done), deadline);
}

bool Thread::joinable() const {
  if (state_ == nullptr) return false;
  absl::MutexLock lock(&state_->mutex);
  return !state_->joined;
}

std::thread::id Thread::id() const {
  if (state_ == nullptr) return std::thread::id();
  absl::MutexLock lock(&state_->mutex);
  return state_->id;
}

const std::string& Thread::name() const {
  static const std::string* const kNone = new std::string();
  return state_ == nullptr ? *kNone : state_->name;
}

void ThreadGroup::Start(std::string name, std::function<absl::Status()> body) {
  threads_.emplace_back(std::move(name), std::move(body), [this](const absl::Status& status) {
    absl::MutexLock lock(&mutex_);
    ++ended_;
    if (!status.ok()) failed_ = true;
  });
}

bool ThreadGroup::WaitForAnEnd(absl::Duration timeout) {
  const int64_t started = static_cast<int64_t>(threads_.size());
  const int64_t seen = seen_;
  absl::MutexLock lock(&mutex_);
  auto ended_since = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return ended_ != seen; };
  if (ended_ < started) mutex_.AwaitWithTimeout(absl::Condition(&ended_since), timeout);
  seen_ = ended_;
  return ended_ == started;
}

bool ThreadGroup::failed() const {
  absl::MutexLock lock(&mutex_);
  return failed_;
}

absl::Status ThreadGroup::JoinAll() {
  absl::Status first;
  for (Thread& thread : threads_) {
    absl::Status status = thread.Join();
    if (first.ok() && !status.ok()) first = std::move(status);
  }
  return first;
}

}  // namespace slimfit::base
