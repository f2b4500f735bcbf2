// RPC metrics at a daemon's gRPC edge: a server interceptor that records every call's latency by
// method and status code, and the bytes of the messages it received and sent by method, into a
// base::MetricRegistry:
//
//   slimfit_rpc_server_seconds{method,code}            histogram (from the call's arrival to its status)
//   slimfit_rpc_server_received_bytes_total{method}    counter (serialized size of request messages)
//   slimfit_rpc_server_sent_bytes_total{method}        counter (serialized size of response messages)
//
// `method` is the full name ("/slimfit.v1.Coordinator/GetJob") of a method of the served services,
// and "other" for anything else a client names, so label values stay a bounded set. Bytes are
// counted for slimfit's own services (their messages are protobuf messages of the generated pool;
// gRPC's health service exchanges raw buffers), latency for every call. A call that ends without a
// status sent (the client went away) is recorded with code CANCELLED.
//
// A daemon may also observe the messages one of its methods sends (the worker reads each
// GradientSummary its ComputeGradient returns), without touching the service's code.
//
// Example:
//   base::MetricRegistry registry;
//   rpc::RpcMetrics metrics(&registry, {v1::Coordinator::service_full_name()});
//   grpc::ServerBuilder builder;
//   metrics.Install(&builder);  // before BuildAndStart
//
// Thread safety: thread-safe; observers run on gRPC's threads, concurrently. The RpcMetrics and the
// registry must outlive every server they are installed in.
#ifndef SLIMFIT_RPC_RPC_METRICS_H_
#define SLIMFIT_RPC_RPC_METRICS_H_

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/metrics.h"

namespace slimfit::rpc {

class RpcMetrics {
 public:
  // Called with every message `method` sends, before it is sent.
  using MessageObserver = std::function<void(const google::protobuf::Message& message)>;

  // `services`: the full names of the services whose methods get their own label (methods are read
  // from the generated descriptor pool); gRPC's health and reflection services are always included.
  // `registry` is not owned.
  RpcMetrics(base::MetricRegistry* registry, const std::vector<std::string>& services);
  RpcMetrics(const RpcMetrics&) = delete;
  RpcMetrics& operator=(const RpcMetrics&) = delete;

  // REQUIRES: before Install; `method` a full method name of a slimfit service given above.
  void ObserveSent(const std::string& method, MessageObserver observer);

  // Adds the interceptor to `builder` (replacing any interceptors set there before).
  void Install(grpc::ServerBuilder* builder);

  // The label for `method`: itself when it belongs to the served services, else "other".
  std::string MethodLabel(absl::string_view method) const;

 private:
  friend class MetricsInterceptor;
  // Whether `method` exchanges protobuf messages of the generated pool (bytes can be measured).
  bool CountsBytes(const std::string& method) const { return protobuf_methods_.count(method) > 0; }
  const MessageObserver* SentObserver(const std::string& method) const;

  std::set<std::string> methods_;           // labelled methods
  std::set<std::string> protobuf_methods_;  // slimfit's: bytes counted
  std::map<std::string, MessageObserver> sent_observers_;
  base::HistogramFamily& seconds_;
  base::CounterFamily& received_bytes_;
  base::CounterFamily& sent_bytes_;
};

}  // namespace slimfit::rpc

#endif  // SLIMFIT_RPC_RPC_METRICS_H_
