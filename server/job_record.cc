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
      next_sequence_(next_sequence),
      terminal_stored_(IsTerminal(job_.state())) {}

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
  return mutex_.AwaitWithDeadline(absl::Condition(&terminal_stored_), deadline);
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
  v1::JobEvent event;
  {
    absl::MutexLock lock(&mutex_);
    const v1::JobState previous = job_.state();
    if (previous == state && job_.state_reason() == reason) return;
    job_.set_state(state);
    job_.set_state_reason(reason);
    *job_.mutable_state_changed_at() = NowTimestamp();
    if (state == v1::JOB_STATE_RUNNING && !job_.has_started_at()) *job_.mutable_started_at() = NowTimestamp();
    if (IsTerminal(state)) *job_.mutable_finished_at() = NowTimestamp();
    if (previous != state) {
      event.mutable_state_changed()->set_previous(previous);
      event.mutable_state_changed()->set_state(state);
      event.mutable_state_changed()->set_reason(reason);
    }
  }
  Persist();
  if (event.has_state_changed()) {
    base::LogInfo(job_id_, ": ", v1::JobState_Name(event.state_changed().state()), " — ", reason);
    Emit(std::move(event));
  } else {
    events_.Notify();  // only the reason changed: stored, not an event
  }
  if (IsTerminal(state)) {
    absl::MutexLock lock(&mutex_);
    terminal_stored_ = true;
  }
}

void JobRecord::SetReason(const std::string& reason) { SetState(state(), reason); }

}  // namespace slimfit::server
