// Client-side latency of gRPC calls, by method: a recorder of samples with nearest-rank
// percentiles, and a client interceptor that times every call on a channel from the moment its
// initial metadata is sent to the moment its status arrives — what the caller waits, queueing on
// both sides and the network included. bench/control_plane_load.cc times the coordinator's control
// RPCs with it.
//
// Example:
//   auto recorder = std::make_shared<LatencyRecorder>();
//   std::shared_ptr<grpc::Channel> channel = MakeTimedChannel("127.0.0.1:50051", recorder);
//   auto stub = v1::Coordinator::NewStub(channel);
//   ... calls ...
//   LatencySummary heartbeats = recorder->Summary("Heartbeat");
//
// Thread safety: LatencyRecorder is safe for concurrent use; interceptors record from the threads
// that finish the calls.
#ifndef SLIMFIT_BENCH_RPC_LATENCY_H_
#define SLIMFIT_BENCH_RPC_LATENCY_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace slimfit::bench {

struct LatencySummary {
  int64_t count = 0;   // calls, failed ones included
  int64_t errors = 0;  // calls whose status was not OK
  // Over every call, in milliseconds (0 when count is 0).
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  std::map<std::string, int64_t> errors_by_code;  // "UNAVAILABLE" → calls
};

// The nearest-rank percentile `q` (0 < q ≤ 1) of `sorted` (ascending): the smallest value with at
// least q·n values at or below it. 0 for an empty vector.
double NearestRankPercentile(const std::vector<double>& sorted, double q);

class LatencyRecorder {
 public:
  LatencyRecorder() = default;
  LatencyRecorder(const LatencyRecorder&) = delete;
  LatencyRecorder& operator=(const LatencyRecorder&) = delete;

  // One call of `method` ("Heartbeat") that took `latency` and ended with `code`.
  void Record(absl::string_view method, absl::Duration latency, grpc::StatusCode code);
  // The calls of `method` so far; zeros when there were none.
  LatencySummary Summary(absl::string_view method) const;
  // Methods with at least one call, by name.
  std::vector<std::string> Methods() const;

 private:
  struct Samples {
    std::vector<double> milliseconds;
    std::map<std::string, int64_t> errors_by_code;
  };
  mutable absl::Mutex mutex_;
  std::map<std::string, Samples, std::less<>> samples_ ABSL_GUARDED_BY(mutex_);
};

// The method's name without its service: "/slimfit.v1.Coordinator/Heartbeat" → "Heartbeat".
std::string ShortMethodName(absl::string_view full_method);

// An interceptor factory whose interceptors record every call's latency in `recorder`.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface> TimingInterceptorFactory(
    std::shared_ptr<LatencyRecorder> recorder);

// A plaintext channel to `address` made as the daemons make theirs (rpc::ChannelArgumentsForPeers),
// timing every call into `recorder`, on a TCP connection of its own — not shared with other
// channels to the same address, so that N channels look like N separate processes to the server.
std::shared_ptr<grpc::Channel> MakeTimedChannel(const std::string& address,
                                                std::shared_ptr<LatencyRecorder> recorder);

}  // namespace slimfit::bench

#endif  // SLIMFIT_BENCH_RPC_LATENCY_H_
