#include "base/certificates.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace slimfit::base {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CertificatesTest, CaSignsLeavesWithSubjectAltNames) {
  const absl::Time now = absl::Now();
  absl::StatusOr<KeyAndCertificate> ca =
      MakeCertificateAuthority("test CA", now - absl::Hours(1), absl::Hours(48));
  ASSERT_TRUE(ca.ok()) << ca.status();
  CertificateRequest request;
  request.common_name = "coordinator";
  request.dns_names = {"coord.example", "localhost"};
  request.ip_addresses = {"127.0.0.1", "::1"};
  absl::StatusOr<KeyAndCertificate> leaf = IssueCertificate(*ca, request);
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  EXPECT_THAT(leaf->key_pem, HasSubstr("BEGIN PRIVATE KEY"));
  absl::StatusOr<CertificateInfo> info = DescribeCertificate(leaf->cert_pem);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->subject_common_name, "coordinator");
  EXPECT_EQ(info->issuer_common_name, "test CA");
  EXPECT_THAT(info->dns_names, ElementsAre("coord.example", "localhost"));
  EXPECT_THAT(info->ip_addresses, ElementsAre("127.0.0.1", "::1"));
  EXPECT_FALSE(info->is_ca);
  EXPECT_TRUE(DescribeCertificate(ca->cert_pem)->is_ca);
  EXPECT_TRUE(VerifyCertificate(leaf->cert_pem, ca->cert_pem, now).ok());
}

TEST(CertificatesTest, ExpiredAndForeignCertificatesDoNotVerify) {
  const absl::Time now = absl::Now();
  absl::StatusOr<KeyAndCertificate> ca =
      MakeCertificateAuthority("ca", now - absl::Hours(72), absl::Hours(720));
  absl::StatusOr<KeyAndCertificate> other =
      MakeCertificateAuthority("other", now - absl::Hours(1), absl::Hours(720));
  ASSERT_TRUE(ca.ok() && other.ok());
  CertificateRequest expired;
  expired.common_name = "w";
  expired.not_before = now - absl::Hours(48);
  expired.validity = absl::Hours(24);
  absl::StatusOr<KeyAndCertificate> old = IssueCertificate(*ca, expired);
  ASSERT_TRUE(old.ok());
  absl::Status status = VerifyCertificate(old->cert_pem, ca->cert_pem, now);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(status.message()), HasSubstr("expired"));
  CertificateRequest fresh;
  fresh.common_name = "w";
  absl::StatusOr<KeyAndCertificate> foreign = IssueCertificate(*other, fresh);
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ(VerifyCertificate(foreign->cert_pem, ca->cert_pem, now).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(CertificatesTest, BadInputIsInvalidArgument) {
  absl::StatusOr<KeyAndCertificate> ca = MakeCertificateAuthority("ca", absl::Now(), absl::Hours(1));
  ASSERT_TRUE(ca.ok());
  CertificateRequest request;
  request.common_name = "x";
  request.ip_addresses = {"not-an-ip"};
  EXPECT_EQ(IssueCertificate(*ca, request).status().code(), absl::StatusCode::kInvalidArgument);
  request.ip_addresses.clear();
  EXPECT_EQ(IssueCertificate(KeyAndCertificate{"junk", ca->cert_pem}, request).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DescribeCertificate("junk").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCertificateAuthority("", absl::Now(), absl::Hours(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::base
