// One job's life on the coordinator, on its own thread: wait for eligible workers (QUEUED), then
// for every round — run its shards on the workers (WorkerPlanner: a plan per worker;
// ShardDispatcher: speed-proportional shards, deadlines, reassignment, aggregation), step the
// optimizer (Trainer), publish the new parameter version, evaluate and checkpoint on schedule —
// until SUCCEEDED, FAILED or CANCELLED. Every state change, round, evaluation, checkpoint, plan
// change and reassignment is stored and published as a JobEvent (JobRecord).
//
// Durability: a runner starts either fresh (writes the round-0 checkpoint first) or from the job's
// newest checkpoint whose files still match the SHA-256 digests recorded when they were written
// (parameters and optimizer state), so a coordinator restart resumes the job at its last good
// checkpoint; newer ones that no longer verify are void, and with none left it starts over from
// the initial parameters. Either way it says so in a JobResumed event. Parameter versions keep
// increasing across restarts, and JobProgress.rounds_completed never decreases: rounds run again
// are marked RoundCompleted.rerun. A spot check that
// catches a worker whose unverified results went into earlier rounds sends the job back to the
// newest checkpoint before them (ShardDispatcher); later checkpoints are void.
//
// Thread safety: public methods are thread-safe; the runner's thread owns the trainer (a
// checkpoint writer reads handles to its tensors, never the trainer, between a round's end and
// the next step).
#ifndef SLIMFIT_SERVER_JOB_RUNNER_H_
#define SLIMFIT_SERVER_JOB_RUNNER_H_

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/thread.h"
#include "performer/model_config.h"
#include "performer/plan.h"
#include "performer/trainer.h"
#include "planner/plan_search.h"
#include "proto/slimfit.pb.h"
#include "server/event_signal.h"
#include "server/job_data.h"
#include "server/job_record.h"
#include "server/runner_options.h"
#include "server/shard_dispatcher.h"
#include "server/state_store.h"
#include "server/worker_leases.h"
#include "server/worker_planner.h"
#include "server/worker_registry.h"
#include "wire/tensor_codec.h"

namespace slimfit::server {

struct RunnerDeps {
  StateStore* store = nullptr;
  WorkerRegistry* registry = nullptr;
  WorkerLeases* leases = nullptr;
  EventSignal* signal = nullptr;
  std::string job_dir;  // checkpoints of this job, and nothing else
  RunnerOptions options;
  JobEventObserver event_observer;  // may be empty
  // The job's initial parameters, for a job none of whose checkpoints verifies any more (the
  // runner then starts over from round 0) when Create was given none. May be empty: such a job
  // then cannot resume (DATA_LOSS).
  std::function<absl::StatusOr<std::vector<at::Tensor>>()> initial_parameters;
};

// The parameters of one published version, immutable while published.
struct ParameterSnapshot {
  uint64_t version = 0;
  performer::ModelConfig config;
  performer::DType dtype = performer::DType::kFloat32;
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;  // checkpoint layout, CPU
  uint64_t feature_seed = 0;
  // Where the job compresses parameter broadcasts (UpdateCompression.parameters): the version
  // `tensors` were rebuilt from (0: published exactly) and the encoded difference to it, which a
  // worker holding that version fetches instead of `tensors`.
  uint64_t base_version = 0;
  v1::Compression compression = v1::COMPRESSION_NONE;
  std::vector<performer::EncodedTensor> difference;
  std::string sha256;  // of `tensors`, with a difference or sent_tensors (ParameterManifest.sha256)
  // A job that trains a subset (JobSpec.trainable): the tensors that change from version to
  // version; a worker holding any earlier version of the job fetches only these. Empty: all.
  std::vector<int> sent_tensors;
  // `tensors` are the trainer's parameters themselves (a job without compression): the runner
  // withdraws the version before the optimizer changes them (JobRunner::WithdrawSharedVersion).
  bool shares_trainer_memory = false;
  // Bytes of this version served to workers so far (FetchParameters adds what it sent): the
  // round that trains on this version reports them as RoundTiming.bytes_to_workers.
  mutable std::atomic<int64_t> bytes_served{0};
};

class JobRunner {
 public:
  // `job` as stored; `initial` the job's initial parameters for a fresh job (when the job has
  // checkpoints it resumes from the newest that verifies, and needs them only when none does:
  // ResumeFromNewestVerified). FAILED_PRECONDITION/INVALID_ARGUMENT when the checkpoint cannot be
  // restored; DATA_LOSS when no checkpoint verifies and no initial parameters are at hand.
  static absl::StatusOr<std::unique_ptr<JobRunner>> Create(v1::Job job, JobData data,
                                                           performer::ModelConfig config,
                                                           std::vector<at::Tensor> initial, RunnerDeps deps);
  ~JobRunner();

  void Start();
  // Cancels the job (CANCELLED with "cancelled by client: <reason>") unless it is terminal.
  void Cancel(const std::string& reason);
  // Stops the thread without changing the job's state (coordinator shutdown): RequestStop cancels
  // its calls and returns; Stop also joins. A coordinator stops every runner before joining any.
  void RequestStop();
  void Stop();

  v1::Job Snapshot() const;
  bool terminal() const;
  // Waits until the job's terminal state (SUCCEEDED, FAILED or CANCELLED) is stored with its event,
  // or `deadline` passed; whether it is. The runner's thread may still be ending (Stop joins it).
  bool AwaitTerminal(absl::Time deadline) const { return record_.AwaitTerminal(deadline); }
  // Notified after every change of the job the runner stores (JobRecord::events).
  EventSignal& events() { return record_.events(); }
  // The parameters of `version`: ABORTED when older than the current one, NOT_FOUND when newer.
  absl::StatusOr<std::shared_ptr<const ParameterSnapshot>> Parameters(uint64_t version) const;
  int64_t max_documents_per_sequence() const { return data_.max_documents_per_sequence(); }

 private:
  JobRunner(v1::Job job, int64_t next_sequence, JobData data, performer::ModelConfig config, RunnerDeps deps);
  void Run();
  absl::Status RunJob();
  // One round: shards, aggregation, the optimizer step, the new version (durable, then published).
  // The next round to run: round + 1, or one after the checkpoint the job went back to when a spot
  // check caught a worker whose unverified results went into earlier rounds.
  absl::StatusOr<int64_t> RunRound(int64_t round, int64_t rounds);
  absl::Status Evaluate(int64_t round);
  // The checkpoint of `round` (the state after its step): StartCheckpoint writes its files on a
  // thread of its own (awaiting any earlier one first); AwaitCheckpoint waits for them and records
  // the checkpoint (store, progress, CheckpointWritten) — or, unless `keep`, deletes its files.
  // REQUIRES: nothing changes the trainer's parameters or optimizer state between the two (the
  // step and restores await first). WriteCheckpoint does both at once.
  absl::Status WriteCheckpoint(int64_t round);
  absl::Status StartCheckpoint(int64_t round);
  absl::Status AwaitCheckpoint(bool keep);
  // Records the checkpoint being written if it is done (the planner's and the dispatcher's
  // while_waiting: on the runner thread, never after a rollback was announced); an error is kept
  // in checkpoint_error_ for RunRound.
  void RecordFinishedCheckpoint();
  // Parameters, optimizer state and progress from `checkpoint`; a new parameter version.
  absl::Status RestoreFromCheckpoint(const CheckpointRecord& checkpoint);
  // Goes on from the newest of `checkpoints` (by increasing round, at most `up_to_round`) whose
  // files still match the digests recorded when they were written; newer ones are void (forgotten,
  // their rounds run again). With none left, from `initial` (or deps_.initial_parameters), as
  // round 0. Emits JobResumed with `reason`. Returns the round resumed from. DATA_LOSS when no
  // checkpoint verifies and no initial parameters are at hand; a checkpoint that cannot be read
  // for another reason (EIO, say) is that error: nothing is forgotten.
  absl::StatusOr<int64_t> ResumeFromNewestVerified(const std::vector<CheckpointRecord>& checkpoints,
                                                   int64_t up_to_round, v1::JobResumed::Reason reason,
                                                   std::vector<at::Tensor> initial);
  // Back to the checkpoint of `round` (or, when it no longer verifies, the newest earlier one that
  // does): later checkpoints are forgotten, their rounds run again. The round gone back to.
  absl::StatusOr<int64_t> RollBack(int64_t round);
  absl::Status ForgetCheckpointsAfter(int64_t round);
  // Finishes a rollback the coordinator stopped in the middle of (from the job's events).
  absl::Status VoidRolledBackCheckpoints(const std::vector<v1::JobEvent>& events);
  // Deletes the files in the job's directory that are not `recorded` checkpoints' (a checkpoint
  // or a temporary file being written when the coordinator stopped). At start only.
  void RemoveUnrecordedFiles(const std::vector<CheckpointRecord>& recorded);
  // The trainer's parameters as the current version: exactly, or (`as_difference`, where the job
  // compresses parameter broadcasts and a version is published) as the previous version plus the
  // decoded encoding of the difference, which workers holding the previous version fetch instead.
  void Publish(bool as_difference);
  absl::Status PublishDifference(const ParameterSnapshot& previous, v1::Compression compression,
                                 ParameterSnapshot* snapshot) const;
  // Before the optimizer steps: a published version that is the trainer's own memory stops being
  // served (fetches retry until Publish), and when a fetch still reads it the trainer's
  // parameters move to a copy (Trainer::SeparateParameters). No-op for a version of its own.
  absl::Status WithdrawSharedVersion();
  bool stopping() const { return stopping_.load(); }
  // What the coordinator's optimizer steps with: the job's optimizer, or a local-steps job's outer one.
  static const v1::Optimizer& StepOptimizer(const v1::JobSpec& spec);
  // The job's trainer over `parameters`, with the optimizer state of `optimizer_path` (a
  // checkpoint's; none when empty), its AdamW moments then moved to files where the coordinator
  // offloads (RunnerOptions::offload_directory; moved after loading, so that no files are made
  // for moments the checkpoint replaces).
  absl::StatusOr<std::unique_ptr<performer::Trainer>> NewTrainer(
      std::vector<at::Tensor> parameters, const v1::JobSpec& spec,
      const std::string& optimizer_path = "") const;

  const RunnerDeps deps_;
  const JobData data_;
  const performer::ModelConfig config_;
  performer::DType dtype_ = performer::DType::kFloat32;
  std::unique_ptr<performer::Trainer> trainer_;  // runner thread only
  // The checkpoint being written (StartCheckpoint), not yet recorded; runner thread only.
  struct WrittenCheckpoint {
    CheckpointRecord record;
    double seconds = 0;  // writing it
  };
  std::future<absl::StatusOr<WrittenCheckpoint>> pending_checkpoint_;
  absl::Status checkpoint_error_;  // runner thread only
  std::vector<double> recent_round_seconds_;

  base::Thread thread_;  // Start; runs Run
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_{false};
  std::atomic<bool> stopping_{false};  // stop_ || cancel_: what the planner and dispatcher watch

  JobRecord record_;
  std::unique_ptr<WorkerPlanner> planner_;       // runner thread only
  std::unique_ptr<ShardDispatcher> dispatcher_;  // Run: runner thread; CancelAll: any

  mutable absl::Mutex mutex_;
  std::string cancel_reason_ ABSL_GUARDED_BY(mutex_);
  std::vector<int> trainable_;  // JobSpec.trainable as parameter indices; empty: all
  std::shared_ptr<const ParameterSnapshot> published_ ABSL_GUARDED_BY(mutex_);
  bool publishing_ ABSL_GUARDED_BY(mutex_) = false;  // between dropping a version and publishing the next
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_JOB_RUNNER_H_
