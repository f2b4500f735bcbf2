#include "rpc/transport_security.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/files.h"

namespace slimfit::rpc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag, absl::string_view kind) {
  absl::StatusOr<std::string> text = base::ReadFileToString(path);
  if (!text.ok())
    return absl::Status(text.status().code(), absl::StrCat(flag, ": ", text.status().message()));
  if (!absl::StrContains(*text, "-----BEGIN ") || !absl::StrContains(*text, kind)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", path, ": not a PEM file holding a ", kind,
                                                   " (make one with 'slimfit certs')"));
  }
  return text;
}

}  // namespace

void AddTlsFlags(base::FlagSet& flags, TlsFlagSet which, TlsOptions* options) {
  if (which == TlsFlagSet::kClient) {
    flags.Bool("tls", &options->use_system_roots,
               "connect with TLS, verifying the coordinator with the system's CAs");
    flags.String(
        "tls_ca", &options->ca_file,
        "connect with TLS, verifying the coordinator against this PEM CA (from 'slimfit certs init')",
        base::FlagSet::kOptionalNoDefault);
    flags.String("tls_cert", &options->cert_file, "PEM client certificate to present (optional)",
                 base::FlagSet::kOptionalNoDefault);
    flags.String("tls_key", &options->key_file, "PEM key of --tls_cert", base::FlagSet::kOptionalNoDefault);
    return;
  }
  flags.String("tls_cert", &options->cert_file, "PEM certificate to serve (and present to peers) with TLS",
               base::FlagSet::kOptionalNoDefault);
  flags.String("tls_key", &options->key_file, "PEM private key of --tls_cert",
               base::FlagSet::kOptionalNoDefault);
  flags.String("tls_ca", &options->ca_file,
               "PEM CA that peers' certificates must chain to (mutual TLS; see 'slimfit certs init')",
               base::FlagSet::kOptionalNoDefault);
  flags.Bool("insecure", &options->insecure, "allow plaintext gRPC on a non-loopback address");
}

absl::StatusOr<std::optional<TlsMaterial>> LoadTls(const TlsOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(options.cert_file.empty() ? "--tls_key needs --tls_cert"
                                                                : "--tls_cert needs --tls_key");
  }
  if (!options.enabled()) return std::optional<TlsMaterial>();
  TlsMaterial material;
  if (!options.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(options.cert_file, "--tls_cert", "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(options.key_file, "--tls_key", "PRIVATE KEY");
    if (!key.ok()) return key.status();
    material.cert = *std::move(cert);
    material.key = *std::move(key);
  }
  if (!options.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(options.ca_file, "--tls_ca", "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    material.ca = *std::move(ca);
  }
  return std::optional<TlsMaterial>(std::move(material));
}

bool IsLoopbackHost(absl::string_view host) {
  host = absl::StripPrefix(absl::StripSuffix(host, "]"), "[");
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status CheckListenSecurity(absl::string_view address, const TlsOptions& options,
                                 absl::string_view flag) {
  if (options.enabled() || options.insecure) return absl::OkStatus();
  const size_t colon = address.rfind(':');
  const absl::string_view host = colon == absl::string_view::npos ? address : address.substr(0, colon);
  if (IsLoopbackHost(host)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on ", address, " (", flag,
      ") without TLS: pass --tls_cert and --tls_key (make them with 'slimfit certs init'), or --insecure to "
      "accept plaintext on this network"));
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const std::optional<TlsMaterial>& material,
                                                           ClientCertificates mode) {
  if (!material.has_value()) return grpc::InsecureServerCredentials();
  grpc_ssl_client_certificate_request_type request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  if (!material->ca.empty()) {
    if (mode == ClientCertificates::kRequest) request = GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
    if (mode == ClientCertificates::kRequire)
      request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  grpc::SslServerCredentialsOptions options(request);
  options.pem_root_certs = material->ca;
  options.pem_key_cert_pairs.push_back({material->key, material->cert});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const std::optional<TlsMaterial>& material) {
  if (!material.has_value()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = material->ca;
  options.pem_private_key = material->key;
  options.pem_cert_chain = material->cert;
  return grpc::SslCredentials(options);
}

void ConfigureServerKeepalive(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Clients ping every 5 s (MakeChannel); accept pings that often, even without calls.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 4000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

bool HasVerifiedClientCertificate(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return false;
  return !auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME).empty();
}

std::string TlsFailureHint(absl::string_view error_message) {
  const std::string lower = absl::AsciiStrToLower(error_message);
  const bool tls = absl::StrContains(lower, "handshake") || absl::StrContains(lower, "ssl") ||
                   absl::StrContains(lower, "certificate") || absl::StrContains(lower, "tls");
  if (!tls) return "";
  return " (TLS failed: the peer's certificate must be signed by the CA given with --tls_ca and name the "
         "address "
         "used — check both, and that both sides use TLS)";
}

}  // namespace slimfit::rpc
