// Real TLS handshakes on loopback: mutual TLS accepted, and every wrong certificate, CA or plaintext
// peer refused; plus the flag-level rules.
#include "rpc/transport_security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/certificates.h"
#include "base/files.h"
#include "base/test_util.h"
#include "proto/slimfit.grpc.pb.h"
#include "rpc/rpc_util.h"

namespace slimfit::rpc {
namespace {

using ::testing::HasSubstr;

// Answers GetProfile with whether the caller presented a verified certificate.
class EchoService final : public v1::Worker::Service {
 public:
  grpc::Status GetProfile(grpc::ServerContext* context, const v1::GetProfileRequest*,
                          v1::GetProfileResponse* response) override {
    response->set_device(HasVerifiedClientCertificate(*context) ? "verified" : "anonymous");
    return grpc::Status::OK;
  }
};

class TransportSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Time now = absl::Now();
    ca_ = *base::MakeCertificateAuthority("test CA", now - absl::Hours(1), absl::Hours(24));
    other_ca_ = *base::MakeCertificateAuthority("other CA", now - absl::Hours(1), absl::Hours(24));
    base::CertificateRequest server;
    server.common_name = "server";
    server.ip_addresses = {"127.0.0.1"};
    server_ = *base::IssueCertificate(ca_, server);
    base::CertificateRequest client;
    client.common_name = "client";
    client_ = *base::IssueCertificate(ca_, client);
    foreign_client_ = *base::IssueCertificate(other_ca_, client);
    client.not_before = now - absl::Hours(48);
    client.validity = absl::Hours(24);
    expired_client_ = *base::IssueCertificate(ca_, client);
  }

  void TearDown() override {
    if (server_process_ != nullptr) server_process_->Shutdown();
  }

  // Starts the echo server with `mode`; returns its address.
  std::string Serve(ClientCertificates mode) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(
        "127.0.0.1:0", ServerCredentials(TlsMaterial{server_.cert_pem, server_.key_pem, ca_.cert_pem}, mode),
        &port);
    builder.RegisterService(&service_);
    ConfigureServerKeepalive(&builder);
    server_process_ = builder.BuildAndStart();
    EXPECT_NE(port, 0);
    return absl::StrCat("127.0.0.1:", port);
  }

  // GetProfile over `credentials`: the device field, or the failure.
  absl::StatusOr<std::string> Call(const std::string& address,
                                   std::shared_ptr<grpc::ChannelCredentials> credentials) {
    auto stub = v1::Worker::NewStub(MakeChannel(address, std::move(credentials)));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetProfileResponse response;
    grpc::Status status = stub->GetProfile(&context, v1::GetProfileRequest(), &response);
    if (!status.ok()) return FromGrpcStatus(status, "GetProfile");
    return response.device();
  }

  static std::optional<TlsMaterial> Client(const base::KeyAndCertificate& identity,
                                           const base::KeyAndCertificate& ca) {
    return TlsMaterial{identity.cert_pem, identity.key_pem, ca.cert_pem};
  }
  static std::optional<TlsMaterial> Anonymous(const base::KeyAndCertificate& ca) {
    return TlsMaterial{"", "", ca.cert_pem};
  }

  base::KeyAndCertificate ca_, other_ca_, server_, client_, foreign_client_, expired_client_;
  EchoService service_;
  std::unique_ptr<grpc::Server> server_process_;
};

TEST_F(TransportSecurityTest, MutualTlsWithTheRightCertificates) {
  const std::string address = Serve(ClientCertificates::kRequire);
  absl::StatusOr<std::string> answer = Call(address, ChannelCredentials(Client(client_, ca_)));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "verified");
}

TEST_F(TransportSecurityTest, RequiredClientCertificatesAreEnforced) {
  const std::string address = Serve(ClientCertificates::kRequire);
  for (const auto& [what, credentials] :
       {std::pair{"no certificate", ChannelCredentials(Anonymous(ca_))},
        std::pair{"a certificate of another CA", ChannelCredentials(Client(foreign_client_, ca_))},
        std::pair{"an expired certificate", ChannelCredentials(Client(expired_client_, ca_))},
        std::pair{"plaintext", ChannelCredentials(std::nullopt)}}) {
    absl::StatusOr<std::string> answer = Call(address, credentials);
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable) << what;
  }
}

TEST_F(TransportSecurityTest, RequestedClientCertificatesAreOptionalButVerified) {
  const std::string address = Serve(ClientCertificates::kRequest);
  EXPECT_EQ(*Call(address, ChannelCredentials(Anonymous(ca_))), "anonymous");
  EXPECT_EQ(*Call(address, ChannelCredentials(Client(client_, ca_))), "verified");
  EXPECT_EQ(Call(address, ChannelCredentials(Client(foreign_client_, ca_))).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TransportSecurityTest, AServerOfAnotherCaIsRefusedWithAHint) {
  const std::string address = Serve(ClientCertificates::kRequest);
  absl::StatusOr<std::string> answer = Call(address, ChannelCredentials(Anonymous(other_ca_)));
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(answer.status().message()), HasSubstr("--tls_ca"));
}

TEST(TransportSecurityFlagsTest, PlaintextOnlyOnLoopbackUnlessInsecure) {
  TlsOptions plain;
  EXPECT_TRUE(CheckListenSecurity("127.0.0.1:0", plain, "--listen").ok());
  EXPECT_TRUE(CheckListenSecurity("[::1]:7000", plain, "--listen").ok());
  EXPECT_TRUE(CheckListenSecurity("localhost:7000", plain, "--listen").ok());
  absl::Status refused = CheckListenSecurity("0.0.0.0:50051", plain, "--listen");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--insecure"));
  plain.insecure = true;
  EXPECT_TRUE(CheckListenSecurity("0.0.0.0:50051", plain, "--listen").ok());
  TlsOptions tls;
  tls.cert_file = "c.pem";
  tls.key_file = "k.pem";
  EXPECT_TRUE(CheckListenSecurity("10.0.0.5:50051", tls, "--listen").ok());
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.8.9.1"));
}

TEST(TransportSecurityFlagsTest, LoadTlsNamesTheFlagAtFault) {
  TlsOptions options;
  EXPECT_FALSE(LoadTls(options)->has_value());  // TLS off
  options.cert_file = testing_util::TempPath("cert.pem");
  EXPECT_EQ(LoadTls(options).status().code(), absl::StatusCode::kInvalidArgument);  // no key
  options.key_file = testing_util::TempPath("key.pem");
  absl::Status missing = LoadTls(options).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("--tls_cert"));
  ASSERT_TRUE(base::WriteFileAtomically(options.cert_file, "hello").ok());
  absl::Status not_pem = LoadTls(options).status();
  EXPECT_EQ(not_pem.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(not_pem.message()), HasSubstr("not a PEM file"));
  absl::StatusOr<base::KeyAndCertificate> ca =
      base::MakeCertificateAuthority("ca", absl::Now(), absl::Hours(1));
  ASSERT_TRUE(base::WriteFileAtomically(options.cert_file, ca->cert_pem).ok());
  ASSERT_TRUE(base::WriteFileAtomically(options.key_file, ca->key_pem).ok());
  absl::StatusOr<std::optional<TlsMaterial>> loaded = LoadTls(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->cert, ca->cert_pem);
  EXPECT_TRUE((*loaded)->ca.empty());
}

}  // namespace
}  // namespace slimfit::rpc
