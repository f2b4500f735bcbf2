// The standard gRPC services every slimfit daemon serves beside its own, so that generic tools
// (grpc_health_probe, grpcurl, load balancers, orchestrators) can talk to it:
//   - grpc.health.v1.Health (gRPC's default health service) with a status per service: the
//     daemon's own service is NOT_SERVING while it starts or drains, SERVING otherwise; the
//     overall status "" follows it;
//   - server reflection (grpc.reflection.v1alpha.ServerReflection), which lists the services and
//     serves their descriptors.
// And the client side of both, used by tests and tools: one health check, the service list.
//
// Example (a daemon):
//   EnableStandardServices();                      // before any ServerBuilder::BuildAndStart
//   std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
//   SetServing(server.get(), {"slimfit.v1.Worker"}, false);   // starting
//   ...                                                         // registered
//   SetServing(server.get(), {"slimfit.v1.Worker"}, true);
//
// The health and reflection services answer without a bearer token: they reveal only whether the
// daemon serves and the public protocol. Under mutual TLS a caller still needs its certificate.
//
// Thread safety: EnableStandardServices is process-wide and idempotent; SetServing may be called
// from any thread; the client functions are thread-safe.
#ifndef SLIMFIT_RPC_STANDARD_SERVICES_H_
#define SLIMFIT_RPC_STANDARD_SERVICES_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace slimfit::rpc {

// Turns on gRPC's default health service and server reflection for every server built afterwards.
void EnableStandardServices();

// Sets the health status of each of `services` and of the overall service "". `server` must have
// been built after EnableStandardServices().
void SetServing(grpc::Server* server, const std::vector<std::string>& services, bool serving);

// grpc.health.v1.HealthCheckResponse.ServingStatus.
enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

// One grpc.health.v1.Health/Check of `service` ("" for the server as a whole). NOT_FOUND for a
// service the server has no status for; the channel's errors otherwise.
absl::StatusOr<HealthStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                         const std::string& service, absl::Duration timeout);

// The full names of the services the server lists through reflection.
absl::StatusOr<std::vector<std::string>> ListServicesByReflection(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout);

}  // namespace slimfit::rpc

#endif  // SLIMFIT_RPC_STANDARD_SERVICES_H_
