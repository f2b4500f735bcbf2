#include "server/job_record.h"

#include <utility>

#include "absl/time/clock.h"
#include "base/log.h"
#include "google/protobuf/util/time_util.h"

namespace slimfit::server {

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

google::protobuf::Timestamp NowTimestamp() {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(absl::Now()));
}

JobRecord::JobRecord(v1::Job job, int64_t next_sequence, StateStore* store, JobEventObserver observer)
    : job_id_(job.job_id()),
      store_(store),
      observer_(std::move(observer)),
      job_(std::move(job)),
      next_sequence_(next_sequence) {}

v1::Job JobRecord::Snapshot() const {
  absl::MutexLock lock(&mutex_);
  return job_;
}

v1::JobState JobRecord::state() const {
  absl::MutexLock lock(&mutex_);
  return job_.state();
}

bool JobRecord::AwaitTerminal(absl::Time deadline) const {
  absl::MutexLock lock(&mutex_);
  auto terminal = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return IsTerminal(job_.state()); };
  return mutex_.AwaitWithDeadline(absl::Condition(&terminal), deadline);
}

void JobRecord::Update(const std::function<void(v1::Job*)>& change) {
  absl::MutexLock lock(&mutex_);
  change(&job_);
}

absl::Status JobRecord::PersistOrFail() {
  const v1::Job copy = Snapshot();
  absl::Status stored = store_->PutJob(copy);
  if (!stored.ok()) base::LogError(job_id_, ": could not store the job: ", stored.message());
  return stored;
}

void JobRecord::Emit(v1::JobEvent event) {
  {
    absl::MutexLock lock(&mutex_);
    event.set_sequence(next_sequence_++);
    event.set_job_id(job_id_);
    *event.mutable_time() = NowTimestamp();
  }
  if (absl::Status stored = store_->AppendEvent(event); !stored.ok()) {
    base::LogError(job_id_, ": could not store an event: ", stored.message());
  }
  if (observer_) observer_(event);
  events_.Notify();
}

void JobRecord::SetState(v1::JobState state, const std::string& reason) {
  // A terminal state is stored, with its event, before anyone can see it here (Snapshot, state,
  // AwaitTerminal): a client told SUCCEEDED or CANCELLED finds it after a crash, and the event's
  // observers (the daemon's metrics) have counted it. Other states are visible at once.
  const bool terminal = IsTerminal(state);
  v1::JobEvent event;
  v1::Job changed;
  {
    absl::MutexLock lock(&mutex_);
    const v1::JobState previous = job_.state();
    if (previous == state && job_.state_reason() == reason) return;
    changed = job_;
    changed.set_state(state);
    changed.set_state_reason(reason);
    *changed.mutable_state_changed_at() = NowTimestamp();
    if (state == v1::JOB_STATE_RUNNING && !changed.has_started_at()) {
      *changed.mutable_started_at() = NowTimestamp();
    }
    if (terminal) *changed.mutable_finished_at() = NowTimestamp();
    if (previous != state) {
      event.mutable_state_changed()->set_previous(previous);
      event.mutable_state_changed()->set_state(state);
      event.mutable_state_changed()->set_reason(reason);
    }
    if (!terminal) job_ = changed;
  }
  if (absl::Status stored = store_->PutJob(changed); !stored.ok()) {
    base::LogError(job_id_, ": could not store the job: ", stored.message());
  }
  const bool state_changed = event.has_state_changed();
  if (state_changed) {
    base::LogInfo(job_id_, ": ", v1::JobState_Name(event.state_changed().state()), " — ", reason);
    Emit(std::move(event));
  }
  if (terminal) {
    absl::MutexLock lock(&mutex_);
    job_.set_state(changed.state());
    job_.set_state_reason(changed.state_reason());
    *job_.mutable_state_changed_at() = changed.state_changed_at();
    *job_.mutable_finished_at() = changed.finished_at();
  }
  if (!state_changed) events_.Notify();  // a new reason alone: stored, not an event
}

void JobRecord::SetReason(const std::string& reason) { SetState(state(), reason); }

}  // namespace slimfit::server
