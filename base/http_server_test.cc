#include "base/http_server.h"

#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/certificates.h"
#include "gtest/gtest.h"

namespace slimfit::base {
namespace {

std::unique_ptr<HttpServer> StartOrDie(const HttpServerOptions& options,
                                       std::map<std::string, HttpHandler> routes) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options, std::move(routes));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

HttpServerOptions Loopback() {
  HttpServerOptions options;
  options.listen = "127.0.0.1:0";
  return options;
}

TEST(HttpServer, ServesRoutesWithHeadersAndRefusesTheRest) {
  std::string seen_token;
  std::string seen_path;
  auto server = StartOrDie(Loopback(), {{"/hello", [&](const HttpRequest& request) {
                                           seen_token = request.Header("AUTHORIZATION");
                                           seen_path = request.path;
                                           HttpResponse response;
                                           response.body = "hi\n";
                                           response.headers.emplace_back("X-Extra", "yes");
                                           return response;
                                         }}});
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  EXPECT_EQ(server->address(), absl::StrCat("127.0.0.1:", server->port()));
  EXPECT_FALSE(server->tls());

  httplib::Client client("127.0.0.1", server->port());
  httplib::Result hello = client.Get("/hello?x=1", {{"Authorization", "Bearer abc"}});
  ASSERT_TRUE(hello) << httplib::to_string(hello.error());
  EXPECT_EQ(hello->status, 200);
  EXPECT_EQ(hello->body, "hi\n");
  EXPECT_EQ(hello->get_header_value("Content-Type"), "text/plain; charset=utf-8");
  EXPECT_EQ(hello->get_header_value("Cache-Control"), "no-store");
  EXPECT_EQ(hello->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(hello->get_header_value("X-Extra"), "yes");
  EXPECT_EQ(seen_token, "Bearer abc");
  EXPECT_EQ(seen_path, "/hello");  // the query is not part of the path

  httplib::Result missing = client.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  httplib::Result post = client.Post("/hello", "data", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
  httplib::Result head = client.Head("/hello");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());

  server->Stop();
  server->Stop();  // idempotent
  httplib::Client after("127.0.0.1", server->port());
  after.set_connection_timeout(std::chrono::seconds(1));
  EXPECT_FALSE(after.Get("/hello"));
}

TEST(HttpServer, HandlersRunConcurrently) {
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  HttpServerOptions options = Loopback();
  options.threads = 4;
  auto server = StartOrDie(options, {{"/slow", [&](const HttpRequest&) {
                                        const int now = ++inside;
                                        int previous = most.load();
                                        while (now > previous && !most.compare_exchange_weak(previous, now)) {
                                        }
                                        absl::SleepFor(absl::Milliseconds(200));
                                        --inside;
                                        return HttpResponse{};
                                      }}});
  ASSERT_NE(server, nullptr);
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&] {
      httplib::Client client("127.0.0.1", server->port());
      httplib::Result result = client.Get("/slow");
      EXPECT_TRUE(result && result->status == 200);
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_GE(most.load(), 2);
}

TEST(HttpServer, RefusesBadAddressesAndPortsInUse) {
  HttpServerOptions bad;
  bad.listen = "no-port";
  EXPECT_EQ(HttpServer::Start(bad, {}).status().code(), absl::StatusCode::kInvalidArgument);
  bad.listen = "127.0.0.1:70000";
  EXPECT_EQ(HttpServer::Start(bad, {}).status().code(), absl::StatusCode::kInvalidArgument);

  auto first = StartOrDie(Loopback(), {});
  ASSERT_NE(first, nullptr);
  HttpServerOptions same;
  same.listen = first->address();
  EXPECT_EQ(HttpServer::Start(same, {}).status().code(), absl::StatusCode::kUnavailable);
  HttpServerOptions foreign;
  foreign.listen = "192.0.2.1:0";  // TEST-NET-1: not an address of this machine
  EXPECT_EQ(HttpServer::Start(foreign, {}).status().code(), absl::StatusCode::kUnavailable);
}

TEST(HttpServer, ServesIpv6Loopback) {
  HttpServerOptions options;
  options.listen = "[::1]:0";
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(options, {{"/", [](const HttpRequest&) { return HttpResponse{}; }}});
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status();
  EXPECT_EQ((*server)->address(), absl::StrCat("[::1]:", (*server)->port()));
  httplib::Client client("::1", (*server)->port());
  httplib::Result result = client.Get("/");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
}

struct Pki {
  KeyAndCertificate ca;
  KeyAndCertificate server;
};

Pki MakePki() {
  Pki pki;
  absl::StatusOr<KeyAndCertificate> ca =
      MakeCertificateAuthority("test CA", absl::Now() - absl::Hours(1), absl::Hours(2));
  EXPECT_TRUE(ca.ok()) << ca.status();
  pki.ca = *ca;
  CertificateRequest request;
  request.common_name = "metrics";
  request.ip_addresses = {"127.0.0.1"};
  absl::StatusOr<KeyAndCertificate> leaf = IssueCertificate(pki.ca, request);
  EXPECT_TRUE(leaf.ok()) << leaf.status();
  pki.server = *leaf;
  return pki;
}

X509_STORE* StoreOf(const std::string& ca_pem) {
  X509_STORE* store = X509_STORE_new();
  BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  X509_STORE_add_cert(store, ca);
  X509_free(ca);
  BIO_free(bio);
  return store;
}

TEST(HttpServer, ServesHttpsVerifiedAgainstTheCa) {
  const Pki pki = MakePki();
  HttpServerOptions options = Loopback();
  options.tls_cert_pem = pki.server.cert_pem;
  options.tls_key_pem = pki.server.key_pem;
  auto server = StartOrDie(options, {{"/metrics", [](const HttpRequest&) {
                                        HttpResponse response;
                                        response.body = "up 1\n";
                                        return response;
                                      }}});
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->tls());

  httplib::SSLClient client("127.0.0.1", server->port());
  client.set_ca_cert_store(StoreOf(pki.ca.cert_pem));  // the client owns the store
  client.enable_server_certificate_verification(true);
  httplib::Result result = client.Get("/metrics");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->body, "up 1\n");

  // Plain HTTP against the HTTPS port gets nothing.
  httplib::Client plain("127.0.0.1", server->port());
  plain.set_read_timeout(std::chrono::seconds(2));
  httplib::Result refused = plain.Get("/metrics");
  EXPECT_TRUE(!refused || refused->status != 200);
}

TEST(HttpServer, RefusesBadTlsMaterial) {
  const Pki pki = MakePki();
  const Pki other = MakePki();
  HttpServerOptions options = Loopback();
  options.tls_cert_pem = pki.server.cert_pem;
  EXPECT_EQ(HttpServer::Start(options, {}).status().code(), absl::StatusCode::kInvalidArgument);  // no key
  options.tls_key_pem = "not pem";
  absl::Status status = HttpServer::Start(options, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("TLS key"), std::string::npos) << status;
  options.tls_key_pem = other.server.key_pem;
  status = HttpServer::Start(options, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("does not match"), std::string::npos) << status;
  options.tls_cert_pem = "garbage";
  EXPECT_EQ(HttpServer::Start(options, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slimfit::base
