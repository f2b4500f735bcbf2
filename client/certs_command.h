// `slimfit certs`: the certificates a TLS deployment needs, without openssl knowledge
// (base/certificates.h: ECDSA P-256, names in subjectAltName).
//
//   slimfit certs init DIR [--hosts=H,...] [--days=N] [--ca_days=N] [--force]
//       a CA (DIR/ca.pem, DIR/ca.key) and the coordinator's certificate (DIR/coordinator.pem,
//       DIR/coordinator.key) naming localhost, 127.0.0.1, ::1 and every --hosts entry (a DNS name
//       or an IP address);
//   slimfit certs issue DIR NAME [--hosts=H,...] [--days=N] [--force]
//       a certificate for a worker (or anything else) signed by DIR's CA: DIR/NAME.pem, DIR/NAME.key.
//
// Keys are written readable by the user only (0600), certificates 0644, each atomically. An
// existing file is never overwritten without --force (FAILED_PRECONDITION naming it). Prints what
// was written and the flags to start the daemons with.
//
// Thread safety: runs on the caller's thread.
#ifndef SLIMFIT_CLIENT_CERTS_COMMAND_H_
#define SLIMFIT_CLIENT_CERTS_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace slimfit::client {

absl::Status RunCertsCommand(absl::Span<const std::string> args, std::ostream& out);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_CERTS_COMMAND_H_
