// A daemon's HTTP endpoint for operators (`--metrics_listen=HOST:PORT`): `GET /metrics` in the
// Prometheus text format, and whatever else the daemon adds (the coordinator's status page).
//
// Security follows the gRPC port's rule (rpc/transport_security.h): with --tls_cert/--tls_key the
// endpoint serves HTTPS with the same certificate; without them it serves plain HTTP on a loopback
// address only, unless --insecure says plaintext is acceptable on this network. /metrics needs no
// token, as Prometheus endpoints conventionally do: it shows ids, states, counts, losses and
// timings, never tokens or training data.
//
// Thread safety: functions; the handler MetricsRoute returns is thread-safe.
#ifndef SLIMFIT_RPC_HTTP_ENDPOINT_H_
#define SLIMFIT_RPC_HTTP_ENDPOINT_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/flags.h"
#include "base/http_server.h"
#include "base/metrics.h"
#include "rpc/transport_security.h"

namespace slimfit::rpc {

// --metrics_listen=HOST:PORT (empty: off) and --metrics_port_file=FILE; `serves` says what the
// endpoint serves, for --help.
void AddMetricsFlags(base::FlagSet& flags, absl::string_view serves, std::string* listen,
                     std::string* port_file);

// Checks --metrics_listen (empty: the endpoint is off, OK): a host:port, and loopback unless TLS
// or --insecure. INVALID_ARGUMENT naming the flag.
absl::Status CheckMetricsListen(const std::string& address, const TlsOptions& tls);
// CheckMetricsListen, and a --metrics_port_file only with --metrics_listen.
absl::Status CheckMetricsFlags(const std::string& address, const std::string& port_file,
                               const TlsOptions& tls);

// Serves `routes` on `address`: HTTPS when `tls` holds a certificate, else HTTP. The server's errors
// (UNAVAILABLE when the address cannot be bound), prefixed with the flag.
absl::StatusOr<std::unique_ptr<base::HttpServer>> StartHttpEndpoint(
    const std::string& address, const std::optional<TlsMaterial>& tls,
    std::map<std::string, base::HttpHandler> routes);

// GET /metrics: the registry's exposition (`registry` must outlive the handler).
base::HttpHandler MetricsRoute(const base::MetricRegistry* registry);

}  // namespace slimfit::rpc

#endif  // SLIMFIT_RPC_HTTP_ENDPOINT_H_
