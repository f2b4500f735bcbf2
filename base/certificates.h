// X.509 certificates for a deployment's TLS, made with OpenSSL's libcrypto so that nobody has to
// know the openssl command: a certificate authority (CA), and certificates it signs for servers
// and clients. Keys are ECDSA P-256; names go into subjectAltName (DNS names and IP addresses —
// verifiers match those, not the CN); every leaf may serve TLS and authenticate as a client
// (extendedKeyUsage serverAuth, clientAuth), since a slimfit daemon is both.
//
// Example:
//   absl::StatusOr<KeyAndCertificate> ca = MakeCertificateAuthority("slimfit CA", absl::Now(),
//   absl::Hours(87600)); CertificateRequest request; request.common_name = "coordinator"; request.dns_names =
//   {"coord.example", "localhost"}; request.ip_addresses = {"10.0.0.5", "127.0.0.1"};
//   absl::StatusOr<KeyAndCertificate> server = IssueCertificate(*ca, request);
//
// Thread safety: pure functions (OpenSSL 3 is thread-safe for these calls).
#ifndef SLIMFIT_BASE_CERTIFICATES_H_
#define SLIMFIT_BASE_CERTIFICATES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace slimfit::base {

// A private key and its certificate, both PEM.
struct KeyAndCertificate {
  std::string key_pem;
  std::string cert_pem;
};

struct CertificateRequest {
  std::string common_name;                               // also the first DNS name when dns_names is empty
  std::vector<std::string> dns_names;                    // subjectAltName DNS entries
  std::vector<std::string> ip_addresses;                 // subjectAltName IP entries, IPv4 or IPv6 text
  absl::Time not_before = absl::Now() - absl::Hours(1);  // an hour of slack for clock skew
  absl::Duration validity = absl::Hours(24 * 365 * 2);
};

// A self-signed CA certificate (basicConstraints CA:true, keyUsage keyCertSign, cRLSign).
// INVALID_ARGUMENT for an empty name or a non-positive validity; INTERNAL when OpenSSL fails.
absl::StatusOr<KeyAndCertificate> MakeCertificateAuthority(const std::string& common_name,
                                                           absl::Time not_before, absl::Duration validity);

// A leaf certificate signed by `ca` for `request`. INVALID_ARGUMENT for an empty common name, an
// IP address that does not parse, a non-positive validity, or a CA key or certificate that is not
// PEM; INTERNAL when OpenSSL fails.
absl::StatusOr<KeyAndCertificate> IssueCertificate(const KeyAndCertificate& ca,
                                                   const CertificateRequest& request);

// What a certificate says, for listings and tests.
struct CertificateInfo {
  std::string subject_common_name;
  std::string issuer_common_name;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  absl::Time not_before;
  absl::Time not_after;
  bool is_ca = false;
};

// INVALID_ARGUMENT when `cert_pem` holds no PEM certificate.
absl::StatusOr<CertificateInfo> DescribeCertificate(const std::string& cert_pem);

// OK when `cert_pem` was signed by the CA certificate `ca_pem` and is valid at `now`; otherwise
// PERMISSION_DENIED saying why (OpenSSL's verification error, e.g. "certificate has expired").
absl::Status VerifyCertificate(const std::string& cert_pem, const std::string& ca_pem, absl::Time now);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_CERTIFICATES_H_
