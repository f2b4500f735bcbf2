// How slimfit's gRPC connections are secured: TLS from PEM files, mutual TLS where a CA is given,
// plaintext only on loopback unless asked for, and keepalive pings so a silent network partition
// ends a call in seconds rather than when TCP gives up.
//
// Who presents what (docs/PROTOCOL.md, "Transport security"):
//   coordinator  serves TLS with --tls_cert/--tls_key. With --tls_ca it also verifies client
//                certificates when presented (the CLI may connect with a token alone), requires one
//                for the worker RPCs, and calls workers over TLS verified against that CA,
//                presenting its own certificate.
//   worker       serves TLS with its --tls_cert/--tls_key; with --tls_ca it requires the caller's
//                certificate signed by that CA, and reaches the coordinator over TLS verified
//                against it, presenting its own certificate.
//   CLI          --tls_ca (or --tls for the system's roots) verifies the coordinator.
//
// Example (a daemon):
//   TlsOptions tls;                       // from AddTlsFlags
//   if (absl::Status s = CheckListenSecurity(listen, tls, "--listen"); !s.ok()) return s;
//   absl::StatusOr<std::optional<TlsMaterial>> material = LoadTls(tls);
//   builder.AddListeningPort(listen, ServerCredentials(*material, ClientCertificates::kRequire), &port);
//
// Thread safety: pure functions; the material is a plain value.
#ifndef SLIMFIT_RPC_TRANSPORT_SECURITY_H_
#define SLIMFIT_RPC_TRANSPORT_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/flags.h"

namespace slimfit::rpc {

// The TLS flags of a binary.
struct TlsOptions {
  std::string cert_file;          // --tls_cert: PEM certificate (chain) presented by this process
  std::string key_file;           // --tls_key: its PEM private key
  std::string ca_file;            // --tls_ca: PEM CA certificate(s) that peers' certificates must chain to
  bool use_system_roots = false;  // CLI --tls: TLS verified against the system's CAs
  bool insecure = false;          // --insecure: plaintext even off loopback

  // Whether connections use TLS at all.
  bool enabled() const { return !cert_file.empty() || !ca_file.empty() || use_system_roots; }
};

// Which flags a binary offers.
enum class TlsFlagSet {
  kDaemon,  // --tls_cert --tls_key --tls_ca --insecure
  kClient,  // --tls --tls_ca --tls_cert --tls_key
};
void AddTlsFlags(base::FlagSet& flags, TlsFlagSet which, TlsOptions* options);

// The PEM contents of the files, read once.
struct TlsMaterial {
  std::string cert;  // empty: no certificate of our own
  std::string key;
  std::string ca;  // empty: the system's roots (clients) or no client verification (servers)
};

// nullopt when TLS is off. INVALID_ARGUMENT naming the flag for --tls_cert without --tls_key (or
// the reverse) or a file that holds no PEM block of the right kind; the errno's code naming the flag
// and path for a file that cannot be read.
absl::StatusOr<std::optional<TlsMaterial>> LoadTls(const TlsOptions& options);

// Refuses plaintext off loopback: OK when `address` (host:port) is a loopback address
// (127.0.0.0/8, ::1, localhost), when TLS is on, or with --insecure; otherwise
// FAILED_PRECONDITION "refusing to listen on <address> without TLS: ...", a line that says what to
// do.
absl::Status CheckListenSecurity(absl::string_view address, const TlsOptions& options,
                                 absl::string_view flag);

// True for 127.0.0.0/8, ::1 and localhost (with or without brackets).
bool IsLoopbackHost(absl::string_view host);

// Whether a server asks for client certificates.
enum class ClientCertificates {
  kIgnore,   // no CA: clients are not asked
  kRequest,  // verified when presented, optional (the coordinator: CLI clients come with tokens)
  kRequire,  // required and verified (the worker: only the coordinator calls it)
};

// Plaintext credentials for nullopt; TLS with our certificate otherwise (REQUIRES material->cert
// and key) and, when material->ca is set, client certificates per `mode`.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const std::optional<TlsMaterial>& material,
                                                           ClientCertificates mode);

// Plaintext for nullopt; TLS otherwise, verifying the server against material->ca (the system's
// roots when empty) and presenting material->cert/key when set.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const std::optional<TlsMaterial>& material);

// Keepalive for a server: clients may ping every 10 s even without calls; the server pings idle
// connections every 30 s and drops one that does not answer in 10 s.
void ConfigureServerKeepalive(grpc::ServerBuilder* builder);

// Whether the call arrived over TLS with a client certificate that verified against the server's
// CA.
bool HasVerifiedClientCertificate(const grpc::ServerContext& context);

// A hint to append to a failed call's message when it looks like a TLS failure (handshake,
// certificate, plaintext against TLS); empty otherwise.
std::string TlsFailureHint(absl::string_view error_message);

}  // namespace slimfit::rpc

#endif  // SLIMFIT_RPC_TRANSPORT_SECURITY_H_
