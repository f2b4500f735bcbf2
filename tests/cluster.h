// A slimfit deployment on loopback for end-to-end tests: a real `slimfit-coordinator` and real
// `slimfit-worker` processes (runfiles of the test) on free ports, their state directories and
// logs under the test's temporary directory, and client calls with the right tokens.
//
// Test-only. Thread safety: one Cluster per test.
#ifndef SLIMFIT_TESTS_CLUSTER_H_
#define SLIMFIT_TESTS_CLUSTER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "performer/safetensors.h"
#include "proto/slimfit.grpc.pb.h"
#include "tests/daemon_process.h"

namespace slimfit::testing_util {

inline constexpr char kClientToken[] = "client-secret";
inline constexpr char kWorkerToken[] = "worker-secret";

class Cluster {
 public:
  // `name` keeps this cluster's files apart from another test's.
  explicit Cluster(std::string name);
  ~Cluster();

  // Starts (or restarts, on the same state directory) the coordinator, with `extra_flags` after
  // the cluster's own.
  absl::Status StartCoordinator(const std::vector<std::string>& extra_flags = {});
  // Starts a worker with the tiny test profile (no calibration) and `budget` ("800KiB").
  // Returns its index. Waits until it is serving.
  absl::StatusOr<int> StartWorker(const std::string& budget);
  // Waits until `count` workers are live (IDLE or BUSY) at the coordinator.
  absl::Status WaitForLiveWorkers(int count, absl::Duration timeout);

  DaemonProcess& coordinator() { return *coordinator_; }
  DaemonProcess& worker(int index) { return *workers_.at(index); }
  // The host:port a worker serves on (what it advertises).
  const std::string& worker_address(int index) const { return worker_addresses_.at(index); }
  const std::string& address() const { return address_; }

  // A stub of the coordinator (a fresh channel each time: survives restarts).
  std::unique_ptr<v1::Coordinator::Stub> Stub() const;

  // Uploads `content` as text/plain (with an optional document separator); the dataset id.
  absl::StatusOr<std::string> UploadText(const std::string& content, const std::optional<std::string>& separator);
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec, const std::string& token = kClientToken);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // Polls until the job is terminal.
  absl::StatusOr<v1::Job> WaitForJob(const std::string& job_id, absl::Duration timeout);
  // Exports the job's latest checkpoint and parses it.
  absl::StatusOr<performer::TensorFile> Export(const std::string& job_id);

  // Every daemon log, for failure messages.
  std::string Logs() const;

 private:
  std::string root_;
  std::string address_;
  std::unique_ptr<DaemonProcess> coordinator_;
  std::vector<std::unique_ptr<DaemonProcess>> workers_;
  std::vector<std::string> worker_addresses_;
  std::vector<std::string> logs_;
};

}  // namespace slimfit::testing_util

#endif  // SLIMFIT_TESTS_CLUSTER_H_
