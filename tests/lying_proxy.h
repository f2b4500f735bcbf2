// A worker that lies, for testing the coordinator's defences: a gRPC proxy in front of a real
// `slimfit-worker` that forwards every Worker RPC (with its bearer token and deadline) and, from a
// given round on, tampers with what ComputeGradient returns — non-finite values, gradients scaled
// by a factor (×1000 is far out of line; ×1.01 is a subtle lie only a second opinion catches),
// a summary that names the wrong parameter version, or a stream broken after its first chunk (as a
// connection lost midway). The worker is started with
// --advertise=<the proxy's address>, so the coordinator only ever talks to the proxy.
//
// Test-only. Thread safety: thread-safe (gRPC's threads call the service).
#ifndef SLIMFIT_TESTS_LYING_PROXY_H_
#define SLIMFIT_TESTS_LYING_PROXY_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/slimfit.grpc.pb.h"

namespace slimfit::testing_util {

struct Lie {
  // kBreakStream: the call fails after the first chunk; kFailAfterSummary: the whole result goes
  // through, then the call ends UNAVAILABLE (a connection lost at the last moment); kStall: the
  // first call of a round ≥ from_round is held, nothing forwarded, until the caller cancels it or
  // stall_seconds pass, then ends UNAVAILABLE (a slow or hung worker; not a lie about results).
  enum class Kind {
    kNotFinite,
    kScale,
    kWrongVersion,
    kBreakStream,
    kFailAfterSummary,
    kStall
  } kind = Kind::kScale;
  double factor = 1000;       // kScale
  int64_t from_round = 1;     // honest before this round (and in every evaluation)
  double stall_seconds = 60;  // kStall
};

class LyingProxy final : public v1::Worker::Service {
 public:
  // Listens on 127.0.0.1 (a free port).
  static absl::StatusOr<std::unique_ptr<LyingProxy>> Start(Lie lie);
  ~LyingProxy() override;

  const std::string& address() const { return address_; }
  // The worker behind the proxy; calls before this are UNAVAILABLE.
  void SetUpstream(const std::string& worker_address);
  // Gradient results it tampered with (kStall: calls it held) so far.
  int lies_told() const { return lies_told_.load(); }
  // Held calls (kStall) that the caller cancelled before stall_seconds passed, and how long the
  // last held call was held (seconds).
  int stalls_cancelled() const { return stalls_cancelled_.load(); }
  double last_stall_seconds() const { return last_stall_seconds_.load(); }

  grpc::Status ComputeGradient(grpc::ServerContext* context, const v1::ComputeGradientRequest* request,
                               grpc::ServerWriter<v1::ComputeGradientResponse>* writer) override;
  grpc::Status GetProfile(grpc::ServerContext* context, const v1::GetProfileRequest* request,
                          v1::GetProfileResponse* response) override;
  grpc::Status Plan(grpc::ServerContext* context, const v1::PlanRequest* request,
                    v1::MemoryPlan* response) override;

 private:
  explicit LyingProxy(Lie lie) : lie_(lie) {}
  // The upstream stub, and a context carrying the caller's token and deadline; null stub when the
  // upstream is not set yet.
  std::shared_ptr<v1::Worker::Stub> Upstream();
  static std::unique_ptr<grpc::ClientContext> Forwarded(const grpc::ServerContext& context);

  const Lie lie_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::atomic<int> lies_told_{0};
  std::atomic<int> stalls_cancelled_{0};
  std::atomic<bool> stalled_{false};
  std::atomic<double> last_stall_seconds_{0};
  absl::Mutex mutex_;
  std::shared_ptr<v1::Worker::Stub> upstream_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace slimfit::testing_util

#endif  // SLIMFIT_TESTS_LYING_PROXY_H_
