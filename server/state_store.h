// The coordinator's durable state: one SQLite database (state.db in the state directory) holding
// datasets, jobs, job events, checkpoints and worker identities. Every write is one transaction
// committed with synchronous=FULL before the call returns, so whatever the coordinator
// acknowledged survives a crash. Large bytes (uploads, checkpoints) live in files beside it; the
// database holds their paths and digests.
//
// Records are stored as serialised slimfit.v1 messages next to the columns they are looked up by.
//
// Thread safety: thread-safe (one connection behind a mutex).
#ifndef SLIMFIT_SERVER_STATE_STORE_H_
#define SLIMFIT_SERVER_STATE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/slimfit.pb.h"

struct sqlite3;

namespace slimfit::server {

struct DatasetRecord {
  v1::DatasetInfo info;
  std::string path;  // the stored bytes
  v1::TokenEncoding token_encoding = v1::TOKEN_ENCODING_UNSPECIFIED;
  std::optional<std::string> document_separator;
};

struct CheckpointRecord {
  std::string job_id;
  int64_t round = 0;
  uint64_t parameter_version = 0;
  std::string model_path;      // safetensors with the config in its metadata
  std::string optimizer_path;  // optimizer state (Trainer::Save)
  int64_t bytes = 0;           // of the model file
  std::string sha256;          // of the model file
  // Of the optimizer file; empty in checkpoints recorded before it was kept (not verifiable).
  std::string optimizer_sha256;
};

// What the coordinator remembers of a worker across restarts.
struct WorkerRecord {
  uint64_t incarnation = 0;       // the latest
  std::string credential_sha256;  // of its credential; empty for a worker that never got one
  bool revoked = false;
  std::string revoked_reason;
  absl::Time revoked_at = absl::InfinitePast();
};

class StateStore {
 public:
  // Opens or creates `path`. INTERNAL with SQLite's message when it cannot.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(const std::string& path);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  absl::Status PutDataset(const DatasetRecord& record);
  absl::StatusOr<std::optional<DatasetRecord>> GetDataset(const std::string& dataset_id);

  // How a worker-local dataset falls into sequences of L tokens (JobSpec.local_datasets), as its
  // holder described it (all pages in one LocalDataLayout, first_sequence 0): by digest and L.
  absl::Status PutLocalLayout(const v1::LocalDataLayout& layout);
  absl::StatusOr<std::optional<v1::LocalDataLayout>> GetLocalLayout(const std::string& sha256,
                                                                    int64_t sequence_length);

  // The next job number (1, 2, …), durable: never reused.
  absl::StatusOr<int64_t> NextJobNumber();
  // Inserts or replaces the job (by job_id); `request_id` is kept from the first insert.
  absl::Status PutJob(const v1::Job& job, const std::string& request_id = "");
  absl::StatusOr<std::optional<v1::Job>> GetJob(const std::string& job_id);
  absl::StatusOr<std::optional<v1::Job>> FindJobByRequestId(const std::string& request_id);
  // Every job, newest first.
  absl::StatusOr<std::vector<v1::Job>> ListJobs();

  // Appends an event (sequence must be new for its job).
  absl::Status AppendEvent(const v1::JobEvent& event);
  // Events of `job_id` with sequence > after_sequence, oldest first; at most `limit`.
  absl::StatusOr<std::vector<v1::JobEvent>> Events(const std::string& job_id, int64_t after_sequence,
                                                   int64_t limit = 100000);
  // The highest event sequence of the job (0: none).
  absl::StatusOr<int64_t> LastEventSequence(const std::string& job_id);

  absl::Status PutCheckpoint(const CheckpointRecord& record);
  // The job's checkpoints by increasing round.
  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& job_id);
  // Forgets the job's checkpoints of rounds after `round` (the job went back to `round`); the
  // records forgotten, so that their files can be removed.
  absl::StatusOr<std::vector<CheckpointRecord>> DeleteCheckpointsAfter(const std::string& job_id,
                                                                       int64_t round);

  // Worker identities by id (inserted or replaced), written by group commit: QueueWorker adds a
  // record to a queue (call it under the lock that orders your decisions: records are written in
  // queue order, so of one id the last queued wins); AwaitWorker returns once that record is
  // durable, writing everything queued so far in one transaction unless a concurrent caller's
  // transaction already took it. Many workers registering at once thus cost one or two commits
  // (each a disk flush), not one each. The error of the transaction that carried the record.
  class PendingWorker;
  std::shared_ptr<PendingWorker> QueueWorker(const std::string& worker_id, const WorkerRecord& record);
  absl::Status AwaitWorker(const std::shared_ptr<PendingWorker>& pending);
  // QueueWorker then AwaitWorker.
  absl::Status PutWorker(const std::string& worker_id, const WorkerRecord& record);
  absl::StatusOr<std::map<std::string, WorkerRecord>> Workers();

 private:
  explicit StateStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const std::string& sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The job of the first row of `sql` (one text parameter, selecting the job column).
  absl::StatusOr<std::optional<v1::Job>> FindJob(const char* sql, const std::string& key);

  // Lock order: mutex_ before queue_mutex_.
  absl::Mutex mutex_;
  sqlite3* db_ ABSL_GUARDED_BY(mutex_);
  absl::Mutex queue_mutex_;
  std::vector<std::shared_ptr<PendingWorker>> queued_workers_ ABSL_GUARDED_BY(queue_mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_STATE_STORE_H_
