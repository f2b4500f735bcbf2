#include "server/state_store.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace slimfit::server {
namespace {

// A prepared statement that finalises itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    status_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  bool ok() const { return status_ == SQLITE_OK; }
  void BindText(int i, const std::string& text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  }
  void BindBlob(int i, const std::string& blob) {
    sqlite3_bind_blob(stmt_, i, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  }
  void BindInt(int i, int64_t value) { sqlite3_bind_int64(stmt_, i, value); }
  void BindNull(int i) { sqlite3_bind_null(stmt_, i); }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }
  std::string Text(int column) {
    const unsigned char* text = sqlite3_column_text(stmt_, column);
    return text == nullptr
               ? std::string()
               : std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt_, column));
  }
  std::string Blob(int column) {
    const void* blob = sqlite3_column_blob(stmt_, column);
    return blob == nullptr ? std::string()
                           : std::string(static_cast<const char*>(blob), sqlite3_column_bytes(stmt_, column));
  }
  int64_t Int(int column) { return sqlite3_column_int64(stmt_, column); }
  bool IsNull(int column) { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  absl::Status Error(absl::string_view what) const {
    return absl::InternalError(absl::StrCat("state database: ", what, ": ", sqlite3_errmsg(db_)));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int status_;
};

absl::Status RunToDone(Statement& statement, absl::string_view what) {
  if (!statement.ok()) return statement.Error(what);
  if (statement.Step() != SQLITE_DONE) return statement.Error(what);
  return absl::OkStatus();
}

template <typename Message>
absl::StatusOr<Message> ParseRecord(const std::string& bytes, absl::string_view what) {
  Message message;
  if (!message.ParseFromString(bytes))
    return absl::DataLossError(absl::StrCat("state database: corrupt ", what));
  return message;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::InternalError(absl::StrCat("cannot open state database ", path, ": ", message));
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<StateStore> store(new StateStore(db));
  absl::MutexLock lock(&store->mutex_);
  for (const char* sql : {
           "PRAGMA journal_mode=WAL",
           "PRAGMA synchronous=FULL",
           "CREATE TABLE IF NOT EXISTS datasets (id TEXT PRIMARY KEY, info BLOB NOT NULL, path TEXT NOT "
           "NULL, "
           "token_encoding INTEGER NOT NULL, separator BLOB)",
           "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
           "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, created INTEGER NOT NULL, request_id TEXT, "
           "job BLOB NOT NULL)",
           "CREATE INDEX IF NOT EXISTS jobs_by_request ON jobs (request_id)",
           "CREATE TABLE IF NOT EXISTS events (job_id TEXT NOT NULL, sequence INTEGER NOT NULL, event BLOB "
           "NOT NULL, "
           "PRIMARY KEY (job_id, sequence))",
           "CREATE TABLE IF NOT EXISTS checkpoints (job_id TEXT NOT NULL, round INTEGER NOT NULL, version "
           "INTEGER "
           "NOT NULL, model_path TEXT NOT NULL, optimizer_path TEXT NOT NULL, bytes INTEGER NOT NULL, sha256 "
           "TEXT "
           "NOT NULL, PRIMARY KEY (job_id, round))",
           "CREATE TABLE IF NOT EXISTS workers (id TEXT PRIMARY KEY, incarnation INTEGER NOT NULL)",
           "CREATE TABLE IF NOT EXISTS local_layouts (sha256 TEXT NOT NULL, sequence_length INTEGER NOT "
           "NULL, "
           "layout BLOB NOT NULL, PRIMARY KEY (sha256, sequence_length))",
       }) {
    if (absl::Status s = store->Exec(sql); !s.ok()) return s;
  }
  // Columns added after the first release: a database written before them gets them here.
  for (const char* column :
       {"credential_sha256 TEXT NOT NULL DEFAULT ''", "revoked INTEGER NOT NULL DEFAULT 0",
        "revoked_reason TEXT NOT NULL DEFAULT ''", "revoked_at INTEGER NOT NULL DEFAULT 0"}) {
    absl::Status added = store->Exec(absl::StrCat("ALTER TABLE workers ADD COLUMN ", column));
    if (!added.ok() && !absl::StrContains(added.message(), "duplicate column")) return added;
  }
  // A checkpoint recorded before the optimizer file's digest was kept reads back with none.
  absl::Status added =
      store->Exec("ALTER TABLE checkpoints ADD COLUMN optimizer_sha256 TEXT NOT NULL DEFAULT ''");
  if (!added.ok() && !absl::StrContains(added.message(), "duplicate column")) return added;
  return store;
}

StateStore::~StateStore() {
  absl::MutexLock lock(&mutex_);
  sqlite3_close(db_);
}

absl::Status StateStore::Exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("state database: ", message, " (", sql.substr(0, 60), ")"));
  }
  return absl::OkStatus();
}

absl::Status StateStore::PutDataset(const DatasetRecord& record) {
  absl::MutexLock lock(&mutex_);
  Statement s(
      db_,
      "INSERT OR REPLACE INTO datasets (id, info, path, token_encoding, separator) VALUES (?, ?, ?, ?, ?)");
  s.BindText(1, record.info.dataset_id());
  s.BindBlob(2, record.info.SerializeAsString());
  s.BindText(3, record.path);
  s.BindInt(4, record.token_encoding);
  if (record.document_separator.has_value())
    s.BindBlob(5, *record.document_separator);
  else
    s.BindNull(5);
  return RunToDone(s, "storing a dataset");
}

absl::StatusOr<std::optional<DatasetRecord>> StateStore::GetDataset(const std::string& dataset_id) {
  absl::MutexLock lock(&mutex_);
  Statement s(db_, "SELECT info, path, token_encoding, separator FROM datasets WHERE id = ?");
  if (!s.ok()) return s.Error("reading a dataset");
  s.BindText(1, dataset_id);
  const int step = s.Step();
  if (step == SQLITE_DONE) return std::optional<DatasetRecord>();
  if (step != SQLITE_ROW) return s.Error("reading a dataset");
  DatasetRecord record;
  absl::StatusOr<v1::DatasetInfo> info = ParseRecord<v1::DatasetInfo>(s.Blob(0), "dataset");
  if (!info.ok()) return info.status();
  record.info = *std::move(info);
  record.path = s.Text(1);
  record.token_encoding = static_cast<v1::TokenEncoding>(s.Int(2));
  if (!s.IsNull(3)) record.document_separator = s.Blob(3);
  return std::optional<DatasetRecord>(std::move(record));
}

absl::Status StateStore::PutLocalLayout(const v1::LocalDataLayout& layout) {
  absl::MutexLock lock(&mutex_);
  Statement s(db_, "INSERT OR REPLACE INTO local_layouts (sha256, sequence_length, layout) VALUES (?, ?, ?)");
  s.BindText(1, layout.sha256());
  s.BindInt(2, layout.sequence_length());
  s.BindBlob(3, layout.SerializeAsString());
  return RunToDone(s, "storing a local dataset's layout");
}

absl::StatusOr<std::optional<v1::LocalDataLayout>> StateStore::GetLocalLayout(const std::string& sha256,
                                                                              int64_t sequence_length) {
  absl::MutexLock lock(&mutex_);
  Statement s(db_, "SELECT layout FROM local_layouts WHERE sha256 = ? AND sequence_length = ?");
  if (!s.ok()) return s.Error("reading a local dataset's layout");
  s.BindText(1, sha256);
  s.BindInt(2, sequence_length);
  const int step = s.Step();
  if (step == SQLITE_DONE) return std::optional<v1::LocalDataLayout>();
  if (step != SQLITE_ROW) return s.Error("reading a local dataset's layout");
  absl::StatusOr<v1::LocalDataLayout> layout = ParseRecord<v1::LocalDataLayout>(s.Blob(0), "local layout");
  if (!layout.ok()) return layout.status();
  return std::optional<v1::LocalDataLayout>(*std::move(layout));
}

absl::StatusOr<int64_t> StateStore::NextJobNumber() {
  absl::MutexLock lock(&mutex_);
  Statement s(db_,
              "INSERT INTO counters (name, value) VALUES ('job', 1) ON CONFLICT(name) DO UPDATE SET value = "
              "value + 1 "
              "RETURNING value");
  if (!s.ok()) return s.Error("numbering a job");
  if (s.Step() != SQLITE_ROW) return s.Error("numbering a job");
  const int64_t value = s.Int(0);
  s.Step();
  return value;
}

absl::Status StateStore::PutJob(const v1::Job& job, const std::string& request_id) {
  absl::MutexLock lock(&mutex_);
  Statement s(
      db_,
      "INSERT INTO jobs (id, created, request_id, job) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
      "job = excluded.job");
  s.BindText(1, job.job_id());
  s.BindInt(2, job.created_at().seconds() * 1000000000 + job.created_at().nanos());
  if (request_id.empty())
    s.BindNull(3);
  else
    s.BindText(3, request_id);
  s.BindBlob(4, job.SerializeAsString());
  return RunToDone(s, "storing a job");
}

absl::StatusOr<std::optional<v1::Job>> StateStore::GetJob(const std::string& job_id) {
  return FindJob("SELECT job FROM jobs WHERE id = ?", job_id);
}

absl::StatusOr<std::optional<v1::Job>> StateStore::FindJobByRequestId(const std::string& request_id) {
  return FindJob("SELECT job FROM jobs WHERE request_id = ?", request_id);
}

absl::StatusOr<std::optional<v1::Job>> StateStore::FindJob(const char* sql, const std::string& key) {
  absl::MutexLock lock(&mutex_);
  Statement s(db_, sql);
  if (!s.ok()) return s.Error("reading a job");
  s.BindText(1, key);
  const int step = s.Step();
  if (step == SQLITE_DONE) return std::optional<v1::Job>();
  if (step != SQLITE_ROW) return s.Error("reading a job");
  absl::StatusOr<v1::Job> job = ParseRecord<v1::Job>(s.Blob(0), "job");
  if (!job.ok()) return job.status();
  return std::optional<v1::Job>(*std::move(job));
}

absl::StatusOr<std::vector<v1::Job>> StateStore::ListJobs() {
  absl::MutexLock lock(&mutex_);
  Statement s(db_, "SELECT job FROM jobs ORDER BY created DESC, id DESC");
  if (!s.ok()) return s.Error("listing jobs");
  std::vector<v1::Job> jobs;
  int step;
  while ((step = s.Step()) == SQLITE_ROW) {
    absl::StatusOr<v1::Job> job = ParseRecord<v1::Job>(s.Blob(0), "job");
    if (!job.ok()) return job.status();
    jobs.push_back(*std::move(job));
  }
  if (step != SQLITE_DONE) return s.Error("listing jobs");
  return jobs;
}

absl::Status StateStore::AppendEvent(const v1::JobEvent& event) {
  absl::MutexLock lock(&mutex_);
  Statement s(db_, "INSERT INTO events (job_id, sequence, event) VALUES (?, ?, ?)");
  s.BindText(1, event.job_id());
  s.BindInt(2, event.sequence());
  s.BindBlob(3, event.SerializeAsString());
  return RunToDone(s, "storing an event");
}

absl::StatusOr<std::vector<v1::JobEvent>> StateStore::Events(const std::string& job_id,
                                                             int64_t after_sequence, int64_t limit) {
  absl::MutexLock lock(&mutex_);
  Statement s(db_, "SELECT event FROM events WHERE job_id = ? AND sequence > ? ORDER BY sequence LIMIT ?");
  if (!s.ok()) return s.Error("reading events");
  s.BindText(1, job_id);
  s.BindInt(2, after_sequence);
  s.BindInt(3, limit);
  std::vector<v1::JobEvent> events;
  int step;
  while ((step = s.Step()) == SQLITE_ROW) {
    absl::StatusOr<v1::JobEvent> event = ParseRecord<v1::JobEvent>(s.Blob(0), "event");
    if (!event.ok()) return event.status();
    events.push_back(*std::move(event));
  }
  if (step != SQLITE_DONE) return s.Error("reading events");
  return events;
}

absl::StatusOr<int64_t> StateStore::LastEventSequence(const std::string& job_id) {
  absl::MutexLock lock(&mutex_);
  Statement s(db_, "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE job_id = ?");
  if (!s.ok()) return s.Error("reading events");
  s.BindText(1, job_id);
  if (s.Step() != SQLITE_ROW) return s.Error("reading events");
  return s.Int(0);
}

absl::Status StateStore::PutCheckpoint(const CheckpointRecord& record) {
  absl::MutexLock lock(&mutex_);
  Statement s(db_,
              "INSERT OR REPLACE INTO checkpoints (job_id, round, version, model_path, optimizer_path, "
              "bytes, sha256, optimizer_sha256) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  s.BindText(1, record.job_id);
  s.BindInt(2, record.round);
  s.BindInt(3, static_cast<int64_t>(record.parameter_version));
  s.BindText(4, record.model_path);
  s.BindText(5, record.optimizer_path);
  s.BindInt(6, record.bytes);
  s.BindText(7, record.sha256);
  s.BindText(8, record.optimizer_sha256);
  return RunToDone(s, "storing a checkpoint");
}

absl::StatusOr<std::vector<CheckpointRecord>> StateStore::Checkpoints(const std::string& job_id) {
  absl::MutexLock lock(&mutex_);
  Statement s(
      db_,
      "SELECT round, version, model_path, optimizer_path, bytes, sha256, optimizer_sha256 FROM checkpoints "
      "WHERE job_id = ? ORDER BY round");
  if (!s.ok()) return s.Error("reading checkpoints");
  s.BindText(1, job_id);
  std::vector<CheckpointRecord> records;
  int step;
  while ((step = s.Step()) == SQLITE_ROW) {
    CheckpointRecord r;
    r.job_id = job_id;
    r.round = s.Int(0);
    r.parameter_version = static_cast<uint64_t>(s.Int(1));
    r.model_path = s.Text(2);
    r.optimizer_path = s.Text(3);
    r.bytes = s.Int(4);
    r.sha256 = s.Text(5);
    r.optimizer_sha256 = s.Text(6);
    records.push_back(std::move(r));
  }
  if (step != SQLITE_DONE) return s.Error("reading checkpoints");
  return records;
}

absl::StatusOr<std::vector<CheckpointRecord>> StateStore::DeleteCheckpointsAfter(const std::string& job_id,
                                                                                 int64_t round) {
  absl::StatusOr<std::vector<CheckpointRecord>> all = Checkpoints(job_id);
  if (!all.ok()) return all.status();
  std::vector<CheckpointRecord> deleted;
  for (CheckpointRecord& record : *all) {
    if (record.round > round) deleted.push_back(std::move(record));
  }
  absl::MutexLock lock(&mutex_);
  Statement s(db_, "DELETE FROM checkpoints WHERE job_id = ? AND round > ?");
  s.BindText(1, job_id);
  s.BindInt(2, round);
  if (absl::Status done = RunToDone(s, "forgetting checkpoints"); !done.ok()) return done;
  return deleted;
}

// One queued worker record; `written` and `status` are set, under the store's mutex_, by the
// transaction that carried it.
class StateStore::PendingWorker {
 public:
  PendingWorker(std::string worker_id, WorkerRecord record)
      : worker_id(std::move(worker_id)), record(std::move(record)) {}
  const std::string worker_id;
  const WorkerRecord record;
  bool written = false;
  absl::Status status;
};

std::shared_ptr<StateStore::PendingWorker> StateStore::QueueWorker(const std::string& worker_id,
                                                                   const WorkerRecord& record) {
  auto pending = std::make_shared<PendingWorker>(worker_id, record);
  absl::MutexLock lock(&queue_mutex_);
  queued_workers_.push_back(pending);
  return pending;
}

absl::Status StateStore::AwaitWorker(const std::shared_ptr<PendingWorker>& pending) {
  absl::MutexLock lock(&mutex_);
  if (pending->written) return pending->status;
  std::vector<std::shared_ptr<PendingWorker>> batch;
  {
    absl::MutexLock queue_lock(&queue_mutex_);
    batch.swap(queued_workers_);  // holds `pending`: it was queued before this call
  }
  absl::Status status = Exec("BEGIN IMMEDIATE");
  for (size_t i = 0; status.ok() && i < batch.size(); ++i) {
    const PendingWorker& w = *batch[i];
    Statement s(
        db_,
        "INSERT OR REPLACE INTO workers (id, incarnation, credential_sha256, revoked, revoked_reason, "
        "revoked_at) VALUES (?, ?, ?, ?, ?, ?)");
    s.BindText(1, w.worker_id);
    s.BindInt(2, static_cast<int64_t>(w.record.incarnation));
    s.BindText(3, w.record.credential_sha256);
    s.BindInt(4, w.record.revoked ? 1 : 0);
    s.BindText(5, w.record.revoked_reason);
    s.BindInt(6, w.record.revoked ? absl::ToUnixMillis(w.record.revoked_at) : 0);
    status = RunToDone(s, "storing a worker");
  }
  if (status.ok()) status = Exec("COMMIT");
  if (!status.ok()) (void)Exec("ROLLBACK");
  for (const std::shared_ptr<PendingWorker>& w : batch) {
    w->written = true;
    w->status = status;
  }
  return pending->status;
}

absl::Status StateStore::PutWorker(const std::string& worker_id, const WorkerRecord& record) {
  return AwaitWorker(QueueWorker(worker_id, record));
}

absl::StatusOr<std::map<std::string, WorkerRecord>> StateStore::Workers() {
  absl::MutexLock lock(&mutex_);
  Statement s(db_,
              "SELECT id, incarnation, credential_sha256, revoked, revoked_reason, revoked_at FROM workers");
  if (!s.ok()) return s.Error("reading workers");
  std::map<std::string, WorkerRecord> workers;
  int step;
  while ((step = s.Step()) == SQLITE_ROW) {
    WorkerRecord& record = workers[s.Text(0)];
    record.incarnation = static_cast<uint64_t>(s.Int(1));
    record.credential_sha256 = s.Text(2);
    record.revoked = s.Int(3) != 0;
    record.revoked_reason = s.Text(4);
    if (record.revoked) record.revoked_at = absl::FromUnixMillis(s.Int(5));
  }
  if (step != SQLITE_DONE) return s.Error("reading workers");
  return workers;
}

}  // namespace slimfit::server
