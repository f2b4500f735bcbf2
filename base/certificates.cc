#include "base/certificates.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace slimfit::base {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Names = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES, GENERAL_NAMES_free>>;
using Store = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreContext = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;

// The OpenSSL error queue as text (and cleared), for INTERNAL errors.
absl::Status OpenSslError(absl::string_view what) {
  std::string detail;
  for (unsigned long code = ERR_get_error(); code != 0; code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    absl::StrAppend(&detail, detail.empty() ? "" : "; ", buffer);
  }
  return absl::InternalError(absl::StrCat(what, detail.empty() ? "" : ": ", detail));
}

Key NewKey() { return Key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256")); }

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslError("writing a private key");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return OpenSslError("writing a certificate");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<Cert> ParseCert(const std::string& pem, absl::string_view what) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a PEM certificate"));
  }
  return cert;
}

absl::StatusOr<Key> ParseKey(const std::string& pem, absl::string_view what) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Key key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a PEM private key"));
  }
  return key;
}

// Sets serial (128 random bits), validity, subject CN and public key; the issuer is set by the
// caller.
absl::Status Prepare(X509* cert, EVP_PKEY* key, const std::string& common_name, absl::Time not_before,
                     absl::Duration validity) {
  unsigned char serial_bytes[16];
  if (RAND_bytes(serial_bytes, sizeof(serial_bytes)) != 1) return OpenSslError("drawing a serial number");
  serial_bytes[0] &= 0x7f;  // positive
  std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>> serial(
      BN_bin2bn(serial_bytes, sizeof(serial_bytes), nullptr));
  if (!serial || BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert)) == nullptr) {
    return OpenSslError("setting the serial number");
  }
  if (X509_set_version(cert, 2) != 1 ||
      ASN1_TIME_set(X509_getm_notBefore(cert), absl::ToTimeT(not_before)) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert), absl::ToTimeT(not_before + validity)) == nullptr ||
      X509_set_pubkey(cert, key) != 1) {
    return OpenSslError("setting the certificate's fields");
  }
  X509_NAME* name = X509_get_subject_name(cert);
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                                 0) != 1) {
    return OpenSslError("setting the common name");
  }
  return absl::OkStatus();
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>> extension(
      X509V3_EXT_conf_nid(nullptr, &context, nid, value));
  if (!extension || X509_add_ext(cert, extension.get(), -1) != 1) {
    return OpenSslError(absl::StrCat("adding the extension ", OBJ_nid2sn(nid), " = ", value));
  }
  return absl::OkStatus();
}

std::string CommonName(X509_NAME* name) {
  char buffer[256] = {};
  const int length = X509_NAME_get_text_by_NID(name, NID_commonName, buffer, sizeof(buffer));
  return length > 0 ? std::string(buffer, static_cast<size_t>(length)) : std::string();
}

absl::Time ToTime(const ASN1_TIME* time) {
  struct tm parsed = {};
  if (ASN1_TIME_to_tm(time, &parsed) != 1) return absl::InfinitePast();
  return absl::FromTM(parsed, absl::UTCTimeZone());
}

}  // namespace

absl::StatusOr<KeyAndCertificate> MakeCertificateAuthority(const std::string& common_name,
                                                           absl::Time not_before, absl::Duration validity) {
  if (common_name.empty()) return absl::InvalidArgumentError("a CA needs a name");
  if (validity <= absl::ZeroDuration()) return absl::InvalidArgumentError("a CA's validity must be positive");
  Key key = NewKey();
  Cert cert(X509_new());
  if (!key || !cert) return OpenSslError("creating the CA");
  if (absl::Status s = Prepare(cert.get(), key.get(), common_name, not_before, validity); !s.ok()) return s;
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1)
    return OpenSslError("self-signing");
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                            std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                            std::pair{NID_subject_key_identifier, "hash"}}) {
    if (absl::Status s = AddExtension(cert.get(), cert.get(), nid, value); !s.ok()) return s;
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return OpenSslError("signing the CA certificate");
  absl::StatusOr<std::string> key_pem = KeyPem(key.get());
  if (!key_pem.ok()) return key_pem.status();
  absl::StatusOr<std::string> cert_pem = CertPem(cert.get());
  if (!cert_pem.ok()) return cert_pem.status();
  return KeyAndCertificate{*std::move(key_pem), *std::move(cert_pem)};
}

absl::StatusOr<KeyAndCertificate> IssueCertificate(const KeyAndCertificate& ca,
                                                   const CertificateRequest& request) {
  if (request.common_name.empty()) return absl::InvalidArgumentError("a certificate needs a common name");
  if (request.validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a certificate's validity must be positive");
  }
  absl::StatusOr<Cert> ca_cert = ParseCert(ca.cert_pem, "the CA certificate");
  if (!ca_cert.ok()) return ca_cert.status();
  absl::StatusOr<Key> ca_key = ParseKey(ca.key_pem, "the CA key");
  if (!ca_key.ok()) return ca_key.status();

  Names names(GENERAL_NAMES_new());
  std::vector<std::string> dns = request.dns_names;
  if (dns.empty()) dns.push_back(request.common_name);
  for (const std::string& dns_name : dns) {
    GENERAL_NAME* entry = GENERAL_NAME_new();
    ASN1_IA5STRING* text = ASN1_IA5STRING_new();
    ASN1_STRING_set(text, dns_name.data(), static_cast<int>(dns_name.size()));
    GENERAL_NAME_set0_value(entry, GEN_DNS, text);
    sk_GENERAL_NAME_push(names.get(), entry);
  }
  for (const std::string& ip : request.ip_addresses) {
    ASN1_OCTET_STRING* address = a2i_IPADDRESS(ip.c_str());
    if (address == nullptr) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat("\"", ip, "\" is not an IP address"));
    }
    GENERAL_NAME* entry = GENERAL_NAME_new();
    GENERAL_NAME_set0_value(entry, GEN_IPADD, address);
    sk_GENERAL_NAME_push(names.get(), entry);
  }

  Key key = NewKey();
  Cert cert(X509_new());
  if (!key || !cert) return OpenSslError("creating the certificate");
  if (absl::Status s =
          Prepare(cert.get(), key.get(), request.common_name, request.not_before, request.validity);
      !s.ok()) {
    return s;
  }
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert->get())) != 1) {
    return OpenSslError("setting the issuer");
  }
  if (X509_add1_ext_i2d(cert.get(), NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return OpenSslError("adding subjectAltName");
  }
  for (auto [nid, value] :
       {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
        std::pair{NID_key_usage, "critical,digitalSignature,keyAgreement"},
        std::pair{NID_ext_key_usage, "serverAuth,clientAuth"}, std::pair{NID_subject_key_identifier, "hash"},
        std::pair{NID_authority_key_identifier, "keyid:always"}}) {
    if (absl::Status s = AddExtension(cert.get(), ca_cert->get(), nid, value); !s.ok()) return s;
  }
  if (X509_sign(cert.get(), ca_key->get(), EVP_sha256()) == 0) return OpenSslError("signing the certificate");
  absl::StatusOr<std::string> key_pem = KeyPem(key.get());
  if (!key_pem.ok()) return key_pem.status();
  absl::StatusOr<std::string> cert_pem = CertPem(cert.get());
  if (!cert_pem.ok()) return cert_pem.status();
  return KeyAndCertificate{*std::move(key_pem), *std::move(cert_pem)};
}

absl::StatusOr<CertificateInfo> DescribeCertificate(const std::string& cert_pem) {
  absl::StatusOr<Cert> cert = ParseCert(cert_pem, "the input");
  if (!cert.ok()) return cert.status();
  CertificateInfo info;
  info.subject_common_name = CommonName(X509_get_subject_name(cert->get()));
  info.issuer_common_name = CommonName(X509_get_issuer_name(cert->get()));
  info.not_before = ToTime(X509_get0_notBefore(cert->get()));
  info.not_after = ToTime(X509_get0_notAfter(cert->get()));
  info.is_ca = X509_check_ca(cert->get()) > 0;
  Names names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert->get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* entry = sk_GENERAL_NAME_value(names.get(), i);
    if (entry->type == GEN_DNS) {
      const ASN1_IA5STRING* text = entry->d.dNSName;
      info.dns_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
                                  static_cast<size_t>(ASN1_STRING_length(text)));
    } else if (entry->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* address = entry->d.iPAddress;
      const int length = ASN1_STRING_length(address);
      char text[INET6_ADDRSTRLEN] = {};
      if ((length == 4 || length == 16) &&
          inet_ntop(length == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(address), text, sizeof(text)) !=
              nullptr) {
        info.ip_addresses.emplace_back(text);
      }
    }
  }
  return info;
}

absl::Status VerifyCertificate(const std::string& cert_pem, const std::string& ca_pem, absl::Time now) {
  absl::StatusOr<Cert> cert = ParseCert(cert_pem, "the certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<Cert> ca = ParseCert(ca_pem, "the CA certificate");
  if (!ca.ok()) return ca.status();
  Store store(X509_STORE_new());
  StoreContext context(X509_STORE_CTX_new());
  if (!store || !context || X509_STORE_add_cert(store.get(), ca->get()) != 1 ||
      X509_STORE_CTX_init(context.get(), store.get(), cert->get(), nullptr) != 1) {
    return OpenSslError("setting up verification");
  }
  X509_STORE_CTX_set_time(context.get(), 0, absl::ToTimeT(now));
  if (X509_verify_cert(context.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(context.get());
    ERR_clear_error();
    return absl::PermissionDeniedError(
        absl::StrCat("certificate \"", CommonName(X509_get_subject_name(cert->get())),
                     "\" does not verify: ", X509_verify_cert_error_string(error)));
  }
  return absl::OkStatus();
}

}  // namespace slimfit::base
