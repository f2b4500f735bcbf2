#include "rpc/http_endpoint.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/metrics_exposition.h"
#include "rpc/rpc_util.h"

namespace slimfit::rpc {
namespace {

constexpr char kFlag[] = "--metrics_listen";

}  // namespace

void AddMetricsFlags(base::FlagSet& flags, absl::string_view serves, std::string* listen,
                     std::string* port_file) {
  flags.String(
      "metrics_listen", listen,
      absl::StrCat("host:port for ", serves,
                   ": HTTPS with --tls_cert, else HTTP on loopback only unless --insecure; empty: off"),
      base::FlagSet::kOptionalNoDefault);
  flags.String("metrics_port_file", port_file, "write the metrics endpoint's bound host:port here",
               base::FlagSet::kOptionalNoDefault);
}

absl::Status CheckMetricsFlags(const std::string& address, const std::string& port_file,
                               const TlsOptions& tls) {
  if (absl::Status s = CheckMetricsListen(address, tls); !s.ok()) return s;
  if (!port_file.empty() && address.empty()) {
    return absl::InvalidArgumentError("--metrics_port_file needs --metrics_listen");
  }
  return absl::OkStatus();
}

absl::Status CheckMetricsListen(const std::string& address, const TlsOptions& tls) {
  if (address.empty()) return absl::OkStatus();
  if (absl::Status s = ValidateAddress(address, kFlag, /*allow_port_zero=*/true); !s.ok()) return s;
  if (absl::Status s = CheckListenSecurity(address, tls, kFlag); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<base::HttpServer>> StartHttpEndpoint(
    const std::string& address, const std::optional<TlsMaterial>& tls,
    std::map<std::string, base::HttpHandler> routes) {
  base::HttpServerOptions options;
  options.listen = address;
  if (tls.has_value() && !tls->cert.empty()) {
    options.tls_cert_pem = tls->cert;
    options.tls_key_pem = tls->key;
  }
  absl::StatusOr<std::unique_ptr<base::HttpServer>> server =
      base::HttpServer::Start(options, std::move(routes));
  if (!server.ok()) {
    return absl::Status(server.status().code(), absl::StrCat(kFlag, ": ", server.status().message()));
  }
  return server;
}

base::HttpHandler MetricsRoute(const base::MetricRegistry* registry) {
  return [registry](const base::HttpRequest&) {
    base::HttpResponse response;
    response.content_type = base::kExpositionContentType;
    response.body = registry->Exposition();
    return response;
  };
}

}  // namespace slimfit::rpc
