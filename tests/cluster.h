// A slimfit deployment on loopback for end-to-end tests: a real `slimfit-coordinator` and real
// `slimfit-worker` processes (runfiles of the test) on free ports, their state directories and
// logs under the test's temporary directory, and client calls with the right tokens.
//
// Test-only. Thread safety: one Cluster per test.
#ifndef SLIMFIT_TESTS_CLUSTER_H_
#define SLIMFIT_TESTS_CLUSTER_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/certificates.h"
#include "performer/safetensors.h"
#include "proto/slimfit.grpc.pb.h"
#include "tests/daemon_process.h"

namespace slimfit::testing_util {

inline constexpr char kClientToken[] = "client-secret";
inline constexpr char kWorkerToken[] = "worker-secret";  // the join token

struct ClusterOptions {
  // Mutual TLS everywhere: a CA made for the cluster, a certificate for the coordinator and one per
  // worker (all naming 127.0.0.1), the coordinator and workers started with --tls_cert, --tls_key
  // and --tls_ca, and Stub() connecting over TLS verified against the CA.
  bool tls = false;
};

struct WorkerOptions {
  std::vector<std::string> extra_flags;
  // TLS clusters: the worker's certificate; empty: one issued by the cluster's CA.
  base::KeyAndCertificate certificate;
  // Wait until the worker serves (writes its port file).
  bool wait_until_serving = true;
};

class Cluster {
 public:
  // `name` keeps this cluster's files apart from another test's.
  explicit Cluster(std::string name, ClusterOptions options = {});
  ~Cluster();

  // Starts (or restarts, on the same state directory) the coordinator, with `extra_flags` after
  // the cluster's own.
  absl::Status StartCoordinator(const std::vector<std::string>& extra_flags = {});
  // Starts a worker with the tiny test profile (no calibration) and `budget` ("800KiB").
  // Returns its index. Waits until it is serving (unless options say not to).
  absl::StatusOr<int> StartWorker(const std::string& budget, const WorkerOptions& options = {});
  // Starts worker `index` again on its state directory (it keeps its id and credential).
  absl::Status RestartWorker(int index, const WorkerOptions& options = {});
  std::string worker_state_dir(int index) const;
  std::string coordinator_state_dir() const;
  // Waits until `count` workers are live (IDLE or BUSY) at the coordinator.
  absl::Status WaitForLiveWorkers(int count, absl::Duration timeout);

  DaemonProcess& coordinator() { return *coordinator_; }
  // TLS clusters: the cluster's CA.
  const base::KeyAndCertificate& ca() const { return ca_; }
  // How Stub() connects: plaintext, or TLS verified against the cluster's CA.
  std::shared_ptr<grpc::ChannelCredentials> ClientCredentials() const;
  DaemonProcess& worker(int index) { return *workers_.at(index); }
  // The host:port a worker serves on (what it advertises, unless started with --advertise).
  const std::string& worker_address(int index) const { return worker_addresses_.at(index); }
  const std::string& address() const { return address_; }

  // A stub of the coordinator (a fresh channel each time: survives restarts).
  std::unique_ptr<v1::Coordinator::Stub> Stub() const;

  // Uploads `content` as text/plain (with an optional document separator); the dataset id.
  absl::StatusOr<std::string> UploadText(const std::string& content,
                                         const std::optional<std::string>& separator);
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec, const std::string& token = kClientToken);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // Polls until the job is terminal.
  absl::StatusOr<v1::Job> WaitForJob(const std::string& job_id, absl::Duration timeout);
  // Exports the job's latest checkpoint and parses it.
  absl::StatusOr<performer::TensorFile> Export(const std::string& job_id);

  // Every daemon log, for failure messages.
  std::string Logs() const;

 private:
  // Starts the worker process of `index` (a new one when index == workers_.size()).
  absl::Status LaunchWorker(int index, const std::string& budget, const WorkerOptions& options);
  // Writes `pair` as <root>/certs/<name>.{pem,key}; the flags that use them.
  std::vector<std::string> TlsFlags(const std::string& name, const base::KeyAndCertificate& pair) const;

  const ClusterOptions options_;
  std::string root_;
  std::string address_;
  base::KeyAndCertificate ca_;
  std::vector<std::string> budgets_;
  std::unique_ptr<DaemonProcess> coordinator_;
  std::vector<std::unique_ptr<DaemonProcess>> workers_;
  std::vector<std::string> worker_addresses_;
  std::vector<std::string> logs_;
};

}  // namespace slimfit::testing_util

#endif  // SLIMFIT_TESTS_CLUSTER_H_
