#include "client/certs_command.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/certificates.h"
#include "base/files.h"
#include "base/flags.h"

namespace slimfit::client {
namespace {

constexpr char kUsage[] =
    "slimfit certs init DIR [--hosts=H,...] [--days=N] [--ca_days=N] [--force]\n"
    "       slimfit certs issue DIR NAME [--hosts=H,...] [--days=N] [--force]";

bool IsIpAddress(const std::string& text) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, text.c_str(), buffer) == 1 || inet_pton(AF_INET6, text.c_str(), buffer) == 1;
}

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

// Writes key (0600) and certificate (0644) as DIR/NAME.key and DIR/NAME.pem.
absl::Status WritePair(const std::string& dir, const std::string& name, const base::KeyAndCertificate& pair) {
  absl::StatusOr<base::AtomicFileWriter> key =
      base::AtomicFileWriter::Create(absl::StrCat(dir, "/", name, ".key"), 0600);
  if (!key.ok()) return key.status();
  if (absl::Status s = key->Append(pair.key_pem); !s.ok()) return s;
  if (absl::Status s = key->Commit(); !s.ok()) return s;
  return base::WriteFileAtomically(absl::StrCat(dir, "/", name, ".pem"), pair.cert_pem);
}

absl::Status RefuseOverwrite(const std::string& dir, const std::vector<std::string>& names, bool force) {
  if (force) return absl::OkStatus();
  for (const std::string& name : names) {
    for (const char* suffix : {".pem", ".key"}) {
      const std::string path = absl::StrCat(dir, "/", name, suffix);
      if (Exists(path)) {
        return absl::FailedPreconditionError(absl::StrCat(path, " exists; --force replaces it"));
      }
    }
  }
  return absl::OkStatus();
}

// The request for `name` naming `hosts` (and, with `local`, localhost and the loopback addresses).
absl::StatusOr<base::CertificateRequest> RequestFor(const std::string& name,
                                                    const std::vector<std::string>& hosts, bool local,
                                                    int64_t days) {
  if (days < 1 || days > 3650)
    return absl::InvalidArgumentError(absl::StrCat("--days=", days, ": expected 1 to 3650"));
  base::CertificateRequest request;
  request.common_name = name;
  request.validity = absl::Hours(24 * days);
  std::vector<std::string> all = hosts;
  if (local) all.insert(all.begin(), {"localhost", "127.0.0.1", "::1"});
  for (const std::string& host : all) {
    if (host.empty()) return absl::InvalidArgumentError("--hosts: an empty entry");
    std::vector<std::string>& list = IsIpAddress(host) ? request.ip_addresses : request.dns_names;
    if (std::find(list.begin(), list.end(), host) == list.end()) list.push_back(host);
  }
  if (request.dns_names.empty()) request.dns_names.push_back(name);
  return request;
}

std::string Names(const base::CertificateRequest& request) {
  std::vector<std::string> names = request.dns_names;
  names.insert(names.end(), request.ip_addresses.begin(), request.ip_addresses.end());
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status RunCertsCommand(absl::Span<const std::string> args, std::ostream& out) {
  std::string action, dir, name;
  std::vector<std::string> hosts;
  int64_t days = 825;
  int64_t ca_days = 3650;
  bool force = false;
  base::FlagSet flags("certs", kUsage,
                      "Makes the certificates a TLS deployment needs: 'init' a CA and the coordinator's\n"
                      "certificate, 'issue' one more certificate (a worker's) signed by that CA. Start the\n"
                      "coordinator with --tls_cert=DIR/coordinator.pem --tls_key=DIR/coordinator.key\n"
                      "--tls_ca=DIR/ca.pem, each worker with its own pair and the same --tls_ca, and point\n"
                      "clients at the CA with --tls_ca or $SLIMFIT_TLS_CA. Keep the .key files private.");
  flags.Positional("ACTION", &action, "init or issue", base::FlagSet::kRequired);
  flags.Positional("DIR", &dir, "directory of the CA and certificates (created)", base::FlagSet::kRequired);
  flags.Positional("NAME", &name, "issue: the certificate's name (e.g. the worker's host name)");
  flags.StringList("hosts", &hosts, "DNS names and IP addresses the certificate is valid for");
  flags.Int("days", &days, "validity of the certificate in days");
  flags.Int("ca_days", &ca_days, "init: validity of the CA in days");
  flags.Bool("force", &force, "replace existing files");
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help_requested()) {
    out << flags.Help();
    return absl::OkStatus();
  }
  if (action != "init" && action != "issue") {
    return absl::InvalidArgumentError(absl::StrCat("unknown action '", action, "'; usage: ", kUsage));
  }
  if (action == "init" && !name.empty()) return absl::InvalidArgumentError("certs init takes no NAME");
  if (action == "issue" && name.empty()) return absl::InvalidArgumentError("certs issue needs a NAME");
  if (name.find('/') != std::string::npos || name == "ca") {
    return absl::InvalidArgumentError(absl::StrCat("NAME '", name, "': a file name other than 'ca'"));
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", dir));
  }

  if (action == "init") {
    if (ca_days < 1 || ca_days > 36500) {
      return absl::InvalidArgumentError(absl::StrCat("--ca_days=", ca_days, ": expected 1 to 36500"));
    }
    if (absl::Status s = RefuseOverwrite(dir, {"ca", "coordinator"}, force); !s.ok()) return s;
    absl::StatusOr<base::KeyAndCertificate> ca =
        base::MakeCertificateAuthority("slimfit CA", absl::Now() - absl::Hours(1), absl::Hours(24 * ca_days));
    if (!ca.ok()) return ca.status();
    absl::StatusOr<base::CertificateRequest> request = RequestFor("coordinator", hosts, /*local=*/true, days);
    if (!request.ok()) return request.status();
    absl::StatusOr<base::KeyAndCertificate> coordinator = base::IssueCertificate(*ca, *request);
    if (!coordinator.ok()) return coordinator.status();
    if (absl::Status s = WritePair(dir, "ca", *ca); !s.ok()) return s;
    if (absl::Status s = WritePair(dir, "coordinator", *coordinator); !s.ok()) return s;
    out << "wrote " << dir << "/ca.pem and ca.key (the CA: keep ca.key private and offline if you can)\n"
        << "wrote " << dir << "/coordinator.pem and coordinator.key, valid for " << Names(*request) << "\n"
        << "start the coordinator with --tls_cert=" << dir << "/coordinator.pem --tls_key=" << dir
        << "/coordinator.key --tls_ca=" << dir << "/ca.pem\n"
        << "then for each worker: slimfit certs issue " << dir << " NAME --hosts=<its address>\n";
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ca_cert = base::ReadFileToString(absl::StrCat(dir, "/ca.pem"));
  if (!ca_cert.ok())
    return absl::Status(ca_cert.status().code(),
                        absl::StrCat(ca_cert.status().message(), " (run 'slimfit certs init' first)"));
  absl::StatusOr<std::string> ca_key = base::ReadFileToString(absl::StrCat(dir, "/ca.key"));
  if (!ca_key.ok()) return ca_key.status();
  if (absl::Status s = RefuseOverwrite(dir, {name}, force); !s.ok()) return s;
  absl::StatusOr<base::CertificateRequest> request = RequestFor(name, hosts, /*local=*/false, days);
  if (!request.ok()) return request.status();
  absl::StatusOr<base::KeyAndCertificate> issued =
      base::IssueCertificate(base::KeyAndCertificate{*ca_key, *ca_cert}, *request);
  if (!issued.ok()) return issued.status();
  if (absl::Status s = WritePair(dir, name, *issued); !s.ok()) return s;
  out << "wrote " << dir << "/" << name << ".pem and " << name << ".key, valid for " << Names(*request)
      << "\n"
      << "start the worker with --tls_cert=" << dir << "/" << name << ".pem --tls_key=" << dir << "/" << name
      << ".key --tls_ca=" << dir << "/ca.pem (copy those three files to it)\n";
  return absl::OkStatus();
}

}  // namespace slimfit::client
