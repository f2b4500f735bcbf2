#include "rpc/http_endpoint.h"

#include <httplib.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/certificates.h"
#include "base/flags.h"
#include "base/metrics.h"
#include "gtest/gtest.h"

namespace slimfit::rpc {
namespace {

TEST(CheckMetricsListen, LoopbackOrTlsOrInsecure) {
  TlsOptions plain;
  EXPECT_TRUE(CheckMetricsListen("", plain).ok());  // off
  EXPECT_TRUE(CheckMetricsListen("127.0.0.1:9090", plain).ok());
  EXPECT_TRUE(CheckMetricsListen("localhost:0", plain).ok());
  EXPECT_TRUE(CheckMetricsListen("[::1]:9090", plain).ok());

  const absl::Status refused = CheckMetricsListen("0.0.0.0:9090", plain);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("--metrics_listen"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("--insecure"), std::string::npos) << refused;

  TlsOptions tls;
  tls.cert_file = "c.pem";
  tls.key_file = "c.key";
  EXPECT_TRUE(CheckMetricsListen("0.0.0.0:9090", tls).ok());
  TlsOptions insecure;
  insecure.insecure = true;
  EXPECT_TRUE(CheckMetricsListen("10.1.2.3:9090", insecure).ok());

  EXPECT_EQ(CheckMetricsListen("no-port", plain).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricsFlags, AddedCheckedAndTheirPortFileNeedsTheEndpoint) {
  std::string listen;
  std::string port_file;
  base::FlagSet flags("daemon", "daemon [flags]", "A daemon.");
  AddMetricsFlags(flags, "metrics (/metrics)", &listen, &port_file);
  ASSERT_TRUE(flags.Parse({"--metrics_listen=127.0.0.1:0", "--metrics_port_file=/tmp/m"}).ok());
  EXPECT_EQ(listen, "127.0.0.1:0");
  EXPECT_EQ(port_file, "/tmp/m");
  EXPECT_NE(flags.Help().find("host:port for metrics (/metrics): HTTPS with --tls_cert"), std::string::npos)
      << flags.Help();
  EXPECT_TRUE(CheckMetricsFlags(listen, port_file, TlsOptions()).ok());
  EXPECT_TRUE(CheckMetricsFlags("", "", TlsOptions()).ok());
  const absl::Status orphan = CheckMetricsFlags("", "/tmp/m", TlsOptions());
  EXPECT_EQ(orphan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(orphan.message(), "--metrics_port_file needs --metrics_listen");
  EXPECT_EQ(CheckMetricsFlags("0.0.0.0:1", "", TlsOptions()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(HttpEndpoint, ServesTheRegistryAsPrometheusText) {
  base::MetricRegistry registry;
  registry.AddCounter("slimfit_test_total", "A test counter.", {}).Get().Increment(3);
  absl::StatusOr<std::unique_ptr<base::HttpServer>> server =
      StartHttpEndpoint("127.0.0.1:0", std::nullopt, {{"/metrics", MetricsRoute(&registry)}});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE((*server)->tls());
  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result result = client.Get("/metrics");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(result->body,
            "# HELP slimfit_test_total A test counter.\n# TYPE slimfit_test_total counter\n"
            "slimfit_test_total 3\n");
}

TEST(HttpEndpoint, ServesHttpsWithTheDaemonsCertificate) {
  absl::StatusOr<base::KeyAndCertificate> ca =
      base::MakeCertificateAuthority("test CA", absl::Now() - absl::Hours(1), absl::Hours(2));
  ASSERT_TRUE(ca.ok());
  base::CertificateRequest request;
  request.common_name = "coordinator";
  request.ip_addresses = {"127.0.0.1"};
  absl::StatusOr<base::KeyAndCertificate> leaf = base::IssueCertificate(*ca, request);
  ASSERT_TRUE(leaf.ok());
  TlsMaterial material;
  material.cert = leaf->cert_pem;
  material.key = leaf->key_pem;
  material.ca = ca->cert_pem;
  base::MetricRegistry registry;
  absl::StatusOr<std::unique_ptr<base::HttpServer>> server =
      StartHttpEndpoint("127.0.0.1:0", material, {{"/metrics", MetricsRoute(&registry)}});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->tls());

  absl::StatusOr<std::unique_ptr<base::HttpServer>> taken =
      StartHttpEndpoint((*server)->address(), std::nullopt, {});
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(taken.status().message().find("--metrics_listen"), std::string::npos) << taken.status();
}

}  // namespace
}  // namespace slimfit::rpc
