// One worker runs one shard at a time, whichever job it belongs to: a job runner holds a worker's
// lease while it calls the worker.
//
// Thread safety: thread-safe.
#ifndef SLIMFIT_SERVER_WORKER_LEASES_H_
#define SLIMFIT_SERVER_WORKER_LEASES_H_

#include <atomic>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace slimfit::server {

class WorkerLeases {
 public:
  // Blocks until the worker is free or `*give_up` becomes true (then returns null; it is looked at
  // at least every 100 ms); the lease is held until the returned object dies.
  // REQUIRES: the WorkerLeases outlives the returned object.
  std::shared_ptr<void> Acquire(const std::string& worker_id, const std::atomic<bool>* give_up);

 private:
  void Release(const std::string& worker_id);
  absl::Mutex mutex_;
  absl::CondVar released_;
  std::set<std::string> held_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_WORKER_LEASES_H_
