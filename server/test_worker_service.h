// TestWorkerService: a stand-in for slimfit-worker's Worker service on the coordinator's side of
// the protocol, for the coordinator's tests (testonly). Only the network is faked: the service runs
// behind a real gRPC server reached through its in-process channel (deadlines, cancellation and
// flow control as gRPC does them), and the gradients it returns are real — the engine
// (performer::ComputeGradient, full back-propagation) on the request's sequences at the parameters
// of the requested version, summed per shard and chunked as a worker chunks them. Scripted failures
// (Behaviour) stand in for workers that are busy, fail, never answer, lie or break the protocol.
//
// ComputeGradient only (the other RPCs are UNIMPLEMENTED); no local steps (UNIMPLEMENTED).
//
// TestWorkerFleet holds such workers by address and gives the WorkerRegistry its stub factory, so
// that a worker registered with that address is called in-process.
//
// Thread safety: thread-safe.
#ifndef SLIMFIT_SERVER_TEST_WORKER_SERVICE_H_
#define SLIMFIT_SERVER_TEST_WORKER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "performer/performer_model.h"
#include "proto/slimfit.grpc.pb.h"
#include "server/worker_registry.h"

namespace slimfit::server {

// The parameters of (job, version), as a worker's parameter cache would hold them.
using TestParameterSource = std::function<absl::StatusOr<std::shared_ptr<const performer::PerformerModel>>(
    const std::string& job_id, uint64_t version)>;

class TestWorkerService final : public v1::Worker::Service {
 public:
  enum class Behaviour {
    kHonest,       // the exact gradient
    kUnavailable,  // UNAVAILABLE "busy" (a busy or draining worker)
    kFails,        // INTERNAL (a shard that fails on this worker)
    kHangs,        // never answers: waits until the call is cancelled (its deadline, a lost worker)
    kLies,         // a well-formed result whose gradient is 1.5× the real one (for spot checks)
    kMalformed,    // a summary that does not echo the request's attempt (a protocol error)
  };

  explicit TestWorkerService(TestParameterSource parameters) : parameters_(std::move(parameters)) {}
  ~TestWorkerService() override;

  // How the next calls are answered: `behaviour` for the next `calls` calls (all, when < 0), then
  // honestly.
  void SetBehaviour(Behaviour behaviour, int calls = -1);
  // ComputeGradient calls that arrived, and those that returned (any way).
  int calls() const;
  int finished() const;
  // Blocks until at least `count` calls arrived, or `real_timeout` passed (a safety net); whether
  // they did.
  bool AwaitCalls(int count, absl::Duration real_timeout = absl::Seconds(60)) const;
  // Calls that hang (kHangs) end now, and later ones do not hang. Idempotent.
  void EndHangingCalls();

  grpc::Status ComputeGradient(grpc::ServerContext* context, const v1::ComputeGradientRequest* request,
                               grpc::ServerWriter<v1::ComputeGradientResponse>* writer) override;

 private:
  Behaviour Next();
  absl::Status Answer(const v1::ComputeGradientRequest& request, Behaviour behaviour,
                      grpc::ServerWriter<v1::ComputeGradientResponse>* writer) const;

  const TestParameterSource parameters_;
  mutable absl::Mutex mutex_;
  Behaviour behaviour_ ABSL_GUARDED_BY(mutex_) = Behaviour::kHonest;
  int behaviour_calls_ ABSL_GUARDED_BY(mutex_) = -1;
  int calls_ ABSL_GUARDED_BY(mutex_) = 0;
  int finished_ ABSL_GUARDED_BY(mutex_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mutex_) = false;  // hanging calls end
};

// In-process workers by address, and the stub factory that reaches them.
class TestWorkerFleet {
 public:
  TestWorkerFleet() = default;
  ~TestWorkerFleet();
  TestWorkerFleet(const TestWorkerFleet&) = delete;
  TestWorkerFleet& operator=(const TestWorkerFleet&) = delete;

  // A worker at `address` (any unique string) serving `parameters`. Owned by the fleet.
  TestWorkerService* Add(const std::string& address, TestParameterSource parameters);
  // For RegistryOptions::stub_factory: a stub on the in-process channel of the worker at the
  // address; INVALID_ARGUMENT for an address no worker of the fleet has. REQUIRES: the fleet
  // outlives the registry's use of the factory and of its stubs.
  WorkerStubFactory StubFactory();

 private:
  struct Served {
    std::unique_ptr<TestWorkerService> service;
    std::unique_ptr<grpc::Server> server;
  };
  absl::Mutex mutex_;
  std::map<std::string, Served> workers_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_TEST_WORKER_SERVICE_H_
