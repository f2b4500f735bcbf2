// TestCoordinator: a small stand-in for `slimfit-coordinator` on the worker's side of the
// protocol, for the worker's tests (testonly). It is the dependency at the network boundary, not
// the thing under test: it serves real gRPC on loopback and answers as PROTOCOL.md says a
// coordinator answers a worker.
//
//   FetchParameters  serves the published (job, version): a ParameterManifest, then every tensor's
//                    chunks (small chunks, so streams have many messages); an older version →
//                    ABORTED with ErrorDetail.current_parameter_version; an unknown job or a
//                    newer version → NOT_FOUND; a finished job → FAILED_PRECONDITION. Counts
//                    fetches; optionally delays them or lets a test tamper with the manifest.
//   RegisterWorker   with the join token (options.worker_token): a new id "w-0001", "w-0002", …
//                    and a credential "wc-<id>"; with a credential: its id, the next incarnation
//                    (another id in the request → PERMISSION_DENIED; a forgotten one → NOT_FOUND;
//                    a revoked one → PERMISSION_DENIED). Every registration gets a coordinator
//                    token "ct-<id>-<incarnation>". Records the requests.
//   Heartbeat        records; NOT_FOUND for a worker not live (unknown, or forgotten);
//                    FAILED_PRECONDITION for an older incarnation; answers the configured
//                    interval and the finished jobs.
//   DeregisterWorker records; NOT_FOUND / FAILED_PRECONDITION as Heartbeat.
// Heartbeat, DeregisterWorker and FetchParameters need a worker's credential (UNAUTHENTICATED
// otherwise; a heartbeat for another worker's id → PERMISSION_DENIED). Requests refused as
// UNAVAILABLE are not recorded. The client RPCs are left
// UNIMPLEMENTED. ForgetWorkers() and LoseState() act as a coordinator that lost its records; Supersede() as
// another process registering with the same id; SetUnavailable() as a coordinator that is restarting.
//
// TestCoordinatorServer runs one on 127.0.0.1 (port 0 picks a free port; a fixed port lets a test
// restart it where the worker expects it).
//
// Thread safety: every method is safe for concurrent use.
#ifndef SLIMFIT_WORKER_TEST_COORDINATOR_H_
#define SLIMFIT_WORKER_TEST_COORDINATOR_H_

#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "performer/performer_model.h"
#include "proto/slimfit.grpc.pb.h"
#include "wire/tensor_codec.h"

namespace slimfit::worker {

class TestCoordinator final : public v1::Coordinator::Service {
 public:
  struct Options {
    std::string worker_token = "worker-secret";
    int64_t heartbeat_interval_ms = 100;
    int64_t lost_after_ms = 2000;
    // Parameter chunks hold at most this many bytes (whole elements).
    int64_t max_chunk_bytes = 4096;
  };

  TestCoordinator() : TestCoordinator(Options()) {}
  explicit TestCoordinator(Options options) : options_(std::move(options)) {}

  // Makes `version` the job's current parameters (a copy on the CPU), served in the model's dtype.
  void Publish(const std::string& job_id, uint64_t version, const performer::PerformerModel& model,
               uint64_t feature_seed = 0);
  // How PublishDifference's version is served.
  struct DifferenceOptions {
    // Advertise a SHA-256 that is not the rebuilt parameters' (a difference that does not rebuild).
    bool corrupt_sha256 = false;
    // Serve the difference whatever base_version the request carries (a coordinator that got it
    // wrong).
    bool ignore_request_base = false;
  };
  // Publishes `version` of `job_id` as UpdateCompression.parameters does: the difference
  // `model` − the job's current version (its base, which must be published) is encoded in
  // `compression` (performer::EncodeTensor), and the version is defined as base + decoded difference
  // (performer::AddDifference), in the base's dtype. Returns those rebuilt parameters (model order,
  // CPU), which whole-parameter fetches of the version serve too. INVALID_ARGUMENT when the job has
  // no published version or `model`'s config or dtype differ from it; the codec's errors.
  absl::StatusOr<std::vector<at::Tensor>> PublishDifference(const std::string& job_id, uint64_t version,
                                                            const performer::PerformerModel& model,
                                                            v1::Compression compression,
                                                            DifferenceOptions difference_options);
  absl::StatusOr<std::vector<at::Tensor>> PublishDifference(const std::string& job_id, uint64_t version,
                                                            const performer::PerformerModel& model,
                                                            v1::Compression compression) {
    return PublishDifference(job_id, version, model, compression, DifferenceOptions());
  }
  // The job ended: FetchParameters answers FAILED_PRECONDITION, heartbeats list it as finished.
  void FinishJob(const std::string& job_id);
  // FetchParameters sleeps this long before answering.
  void SetFetchDelay(absl::Duration delay);
  // Called on every manifest before it is sent (a difference's base_version, compression and sha256
  // already set).
  void SetManifestHook(std::function<void(v1::ParameterManifest*)> hook);
  // FetchParameters calls that asked for (job, version), answered or not.
  int FetchCount(const std::string& job_id, uint64_t version) const;
  // The base_version of every FetchParameters call that asked for (job, version), in arrival order.
  std::vector<uint64_t> FetchBaseVersions(const std::string& job_id, uint64_t version) const;

  // Worker RPCs (all four) answer UNAVAILABLE while set.
  void SetUnavailable(bool unavailable);
  // Forgets which workers are live, keeping their ids: heartbeats get NOT_FOUND, a registration
  // with a known id is accepted (a coordinator that dropped the workers' records).
  void ForgetWorkers();
  // Forgets every worker id and credential too: a credential gets UNAUTHENTICATED (a coordinator
  // that lost its whole state).
  void LoseState();
  // A newer incarnation of `worker_id` registered elsewhere: the current one is superseded.
  void Supersede(const std::string& worker_id);
  // A worker joined out of band (as if it had registered with the join token): its credential.
  std::string AddWorker();
  // Revokes `worker_id`: its credential gets PERMISSION_DENIED from now on.
  void Revoke(const std::string& worker_id);
  // The coordinator token of the worker's current incarnation ("" when it never registered): what
  // a test presents to call the worker's ComputeGradient as its coordinator.
  std::string CoordinatorToken(const std::string& worker_id) const;

  std::vector<v1::RegisterWorkerRequest> registrations() const;
  std::vector<v1::HeartbeatRequest> heartbeats() const;
  std::vector<v1::DeregisterWorkerRequest> deregistrations() const;
  // Waits until `predicate` (called under the lock with this object) holds; false on timeout.
  bool WaitFor(const std::function<bool(const TestCoordinator&)>& predicate, absl::Duration timeout) const;
  // Counts for WaitFor predicates, which run with the lock held.
  size_t registration_count() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return registrations_.size(); }
  size_t heartbeat_count() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return heartbeats_.size(); }
  size_t deregistration_count() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return deregistrations_.size(); }

  grpc::Status RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status DeregisterWorker(grpc::ServerContext* context, const v1::DeregisterWorkerRequest* request,
                                v1::DeregisterWorkerResponse* response) override;
  grpc::Status FetchParameters(grpc::ServerContext* context, const v1::FetchParametersRequest* request,
                               grpc::ServerWriter<v1::FetchParametersResponse>* writer) override;

 private:
  struct Published {
    uint64_t version = 0;
    v1::ParameterManifest manifest;
    std::vector<std::string> names;
    std::vector<at::Tensor> tensors;  // the whole parameters (rebuilt ones for a difference)
    // PublishDifference only: the version the difference is relative to (0: none), and what travels.
    uint64_t base_version = 0;
    v1::Compression compression = v1::COMPRESSION_NONE;
    std::vector<performer::EncodedTensor> difference;
    std::string sha256;  // of `tensors`, as advertised
    bool ignore_request_base = false;
  };

  // The worker whose credential the call carries (UNAUTHENTICATED otherwise; PERMISSION_DENIED
  // when revoked).
  absl::StatusOr<std::string> Caller(const grpc::ServerContext& context) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK, or the status a heartbeat / deregistration of (id, incarnation) gets.
  grpc::Status CheckIncarnation(const std::string& worker_id, uint64_t incarnation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;

  mutable absl::Mutex mu_;
  std::map<std::string, Published> jobs_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> finished_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, uint64_t>, int> fetches_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, uint64_t>, std::vector<uint64_t>> fetch_bases_ ABSL_GUARDED_BY(mu_);
  absl::Duration fetch_delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::function<void(v1::ParameterManifest*)> manifest_hook_ ABSL_GUARDED_BY(mu_);
  bool unavailable_ ABSL_GUARDED_BY(mu_) = false;
  int next_worker_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, uint64_t> incarnations_ ABSL_GUARDED_BY(mu_);    // worker id → current
  std::map<std::string, std::string> credentials_ ABSL_GUARDED_BY(mu_);  // credential → worker id
  std::set<std::string> revoked_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> live_ ABSL_GUARDED_BY(mu_);  // registered since the last ForgetWorkers
  std::vector<v1::RegisterWorkerRequest> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::DeregisterWorkerRequest> deregistrations_ ABSL_GUARDED_BY(mu_);
};

class TestCoordinatorServer {
 public:
  // Serves `service` (not owned; outlives the server) on 127.0.0.1:`port`. nullptr when the port
  // cannot be bound.
  static std::unique_ptr<TestCoordinatorServer> Start(TestCoordinator* service, int port = 0);
  ~TestCoordinatorServer() { Shutdown(); }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Stops serving (cancels open calls after a short grace period). Idempotent.
  void Shutdown();

 private:
  TestCoordinatorServer(std::unique_ptr<grpc::Server> server, int port)
      : server_(std::move(server)), port_(port) {}

  std::unique_ptr<grpc::Server> server_;
  int port_;
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_TEST_COORDINATOR_H_
