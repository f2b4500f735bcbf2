// The record of one job while a runner drives it: the v1::Job (state, reason, progress) and its
// event stream. Every change is stored (StateStore) before it is signalled on the job's own
// EventSignal (events()), so a WatchJob stream or a restarted coordinator never sees something that
// was not durable, and a stream of this job wakes for this job's changes only.
//
// Example:
//   record.Update([&](v1::Job* job) { job->mutable_progress()->set_rounds_completed(round); });
//   if (absl::Status s = record.PersistOrFail(); !s.ok()) return s;  // durable before published
//   record.Emit(std::move(event));                                    // sequence, time, store, wake
//
// Observers: an optional JobEventObserver sees every event after it is stored (the coordinator's
// metrics count rounds, phases and reassignments from them); it runs on the emitting thread and must
// be quick and thread-safe.
//
// Thread safety: thread-safe. The store is not owned and must outlive the record.
#ifndef SLIMFIT_SERVER_JOB_RECORD_H_
#define SLIMFIT_SERVER_JOB_RECORD_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/slimfit.pb.h"
#include "server/event_signal.h"
#include "server/state_store.h"

namespace slimfit::server {

// SUCCEEDED, FAILED or CANCELLED.
bool IsTerminal(v1::JobState state);
// Called with every event a job publishes, after it is stored.
using JobEventObserver = std::function<void(const v1::JobEvent& event)>;
// Now, as the protocol's timestamps carry it.
google::protobuf::Timestamp NowTimestamp();

class JobRecord {
 public:
  // `next_sequence` is one above the last event sequence stored for this job.
  JobRecord(v1::Job job, int64_t next_sequence, StateStore* store, JobEventObserver observer = nullptr);
  JobRecord(const JobRecord&) = delete;
  JobRecord& operator=(const JobRecord&) = delete;

  const std::string& job_id() const { return job_id_; }
  v1::Job Snapshot() const;
  v1::JobState state() const;
  bool terminal() const { return IsTerminal(state()); }
  // Waits until the job's terminal state is stored (the job and its terminal event, as SetState
  // stores them) or `deadline` passed; whether it is. A caller told "terminal" may acknowledge the
  // state: a coordinator that crashes afterwards resumes with it.
  bool AwaitTerminal(absl::Time deadline) const;
  // Notified after every change the record stores: an event, or a new state reason.
  EventSignal& events() { return events_; }

  // Applies `change` to the job under the record's lock. Not stored: call Persist afterwards.
  void Update(const std::function<void(v1::Job*)>& change);
  // Stores the job. A failure is logged and returned; a round must not publish a version the store
  // does not know (it could be reused after a restart).
  absl::Status PersistOrFail();
  void Persist() { (void)PersistOrFail(); }

  // Numbers `event` (per-job sequence), stamps it with the job id and time, stores it and wakes
  // this job's watchers (events()). A store failure is logged; the event is still signalled.
  void Emit(v1::JobEvent event);

  // Sets the state and its reason, stores the job and, when the state changed, emits a
  // JobStateChanged event (a new reason alone only wakes watchers). Sets started_at on the first
  // RUNNING and finished_at on a terminal state. A terminal state becomes visible (Snapshot,
  // state, AwaitTerminal) only once the job and its event are stored and observed.
  // REQUIRES: one thread at a time calls SetState/SetReason for a record (the runner's).
  void SetState(v1::JobState state, const std::string& reason);
  // SetState with the current state: a new reason ("waiting for 2 workers").
  void SetReason(const std::string& reason);

 private:
  const std::string job_id_;
  StateStore* const store_;
  const JobEventObserver observer_;
  EventSignal events_;

  mutable absl::Mutex mutex_;
  v1::Job job_ ABSL_GUARDED_BY(mutex_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_JOB_RECORD_H_
