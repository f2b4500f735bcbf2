#include "client/certs_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <sstream>

#include "absl/time/clock.h"
#include "base/certificates.h"
#include "base/files.h"
#include "base/test_util.h"

namespace slimfit::client {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

absl::Status Certs(std::vector<std::string> args, std::string* out = nullptr) {
  std::ostringstream stream;
  absl::Status status = RunCertsCommand(args, stream);
  if (out != nullptr) *out = stream.str();
  return status;
}

TEST(CertsCommandTest, InitAndIssueMakeAWorkingChain) {
  const std::string dir = testing_util::TempPath("certs_chain");
  std::string out;
  ASSERT_TRUE(Certs({"init", dir, "--hosts=coord.example,10.0.0.5"}, &out).ok());
  EXPECT_THAT(out, HasSubstr("--tls_cert=" + dir + "/coordinator.pem"));
  ASSERT_TRUE(Certs({"issue", dir, "worker7", "--hosts=node7.example,10.0.0.7"}).ok());

  const std::string ca = *base::ReadFileToString(dir + "/ca.pem");
  absl::StatusOr<base::CertificateInfo> coordinator =
      base::DescribeCertificate(*base::ReadFileToString(dir + "/coordinator.pem"));
  ASSERT_TRUE(coordinator.ok());
  // The names go into subjectAltName, IPs as IP entries (not only the CN).
  EXPECT_THAT(coordinator->dns_names, Contains("coord.example"));
  EXPECT_THAT(coordinator->dns_names, Contains("localhost"));
  EXPECT_THAT(coordinator->ip_addresses, Contains("10.0.0.5"));
  EXPECT_THAT(coordinator->ip_addresses, Contains("127.0.0.1"));
  const std::string worker = *base::ReadFileToString(dir + "/worker7.pem");
  EXPECT_THAT(base::DescribeCertificate(worker)->ip_addresses, Contains("10.0.0.7"));
  EXPECT_TRUE(base::VerifyCertificate(worker, ca, absl::Now()).ok());

  struct stat key;
  ASSERT_EQ(stat((dir + "/worker7.key").c_str(), &key), 0);
  EXPECT_EQ(key.st_mode & 0777, 0600);
  ASSERT_EQ(stat((dir + "/ca.key").c_str(), &key), 0);
  EXPECT_EQ(key.st_mode & 0777, 0600);
}

TEST(CertsCommandTest, NeverOverwritesWithoutForceAndExplainsBadInput) {
  const std::string dir = testing_util::TempPath("certs_again");
  ASSERT_TRUE(Certs({"init", dir}).ok());
  const std::string before = *base::ReadFileToString(dir + "/ca.pem");
  absl::Status again = Certs({"init", dir});
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.message()), HasSubstr("--force"));
  EXPECT_EQ(*base::ReadFileToString(dir + "/ca.pem"), before);
  EXPECT_TRUE(Certs({"init", dir, "--force"}).ok());
  EXPECT_NE(*base::ReadFileToString(dir + "/ca.pem"), before);

  EXPECT_EQ(Certs({"renew", dir}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Certs({"issue", dir}).code(), absl::StatusCode::kInvalidArgument);  // no NAME
  EXPECT_EQ(Certs({"issue", dir, "ca"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Certs({"issue", dir, "w", "--days=0"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Certs({"issue", testing_util::TempPath("no_ca"), "w"}).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace slimfit::client
