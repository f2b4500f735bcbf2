// Flag parsing of slimfit-coordinator. The daemon itself runs in //tests:e2e_test.
#include "server/coordinator_daemon.h"

#include <string>
#include <vector>

#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

CoordinatorEnvironment Env() {
  CoordinatorEnvironment env;
  env.token = "client-secret";
  env.worker_token = "worker-secret";
  return env;
}

TEST(ParseCoordinatorFlagsTest, DefaultsAndTokensFromTheEnvironment) {
  absl::StatusOr<ParsedCoordinatorFlags> parsed = ParseCoordinatorFlags({"--state_dir=/var/lib/s"}, Env());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const CoordinatorDaemonOptions& o = parsed->options;
  EXPECT_EQ(o.listen, "127.0.0.1:50051");
  EXPECT_EQ(o.state_dir, "/var/lib/s");
  EXPECT_EQ(o.token, "client-secret");
  EXPECT_EQ(o.worker_token, "worker-secret");
  EXPECT_EQ(o.heartbeat_interval_ms, 1000);
  EXPECT_EQ(o.lost_after_ms, 5000);
  EXPECT_EQ(o.shard_timeout_seconds, 120);
  EXPECT_EQ(o.max_attempts, 5);
  EXPECT_EQ(o.upload_limit_bytes, int64_t{1} << 30);
  EXPECT_EQ(o.max_model_bytes, int64_t{2} << 30);
  EXPECT_EQ(o.threads, 1);
}

TEST(ParseCoordinatorFlagsTest, FlagsWinOverTheEnvironment) {
  absl::StatusOr<ParsedCoordinatorFlags> parsed = ParseCoordinatorFlags(
      {"--state_dir=/s", "--token=a", "--worker_token=b", "--listen=0.0.0.0:0", "--insecure",
       "--upload_limit=2GiB", "--max_model_bytes=16GiB", "--heartbeat_interval_ms=100", "--lost_after_ms=300",
       "--port_file=/tmp/p", "--threads=2"},
      Env());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const CoordinatorDaemonOptions& o = parsed->options;
  EXPECT_EQ(o.token, "a");
  EXPECT_EQ(o.worker_token, "b");
  EXPECT_EQ(o.listen, "0.0.0.0:0");
  EXPECT_TRUE(o.tls.insecure);
  EXPECT_EQ(o.upload_limit_bytes, int64_t{2} << 30);
  EXPECT_EQ(o.max_model_bytes, int64_t{16} << 30);
  EXPECT_EQ(o.heartbeat_interval_ms, 100);
  EXPECT_EQ(o.lost_after_ms, 300);
  EXPECT_EQ(o.port_file, "/tmp/p");
  EXPECT_EQ(o.threads, 2);
}

TEST(ParseCoordinatorFlagsTest, TokenFilesAndTls) {
  absl::StatusOr<ParsedCoordinatorFlags> parsed = ParseCoordinatorFlags(
      {"--state_dir=/s", "--token_file=/etc/c", "--worker_token_file=/etc/j", "--listen=0.0.0.0:443",
       "--tls_cert=c.pem", "--tls_key=k.pem", "--tls_ca=ca.pem"},
      CoordinatorEnvironment{});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->options.token_file, "/etc/c");
  EXPECT_EQ(parsed->options.worker_token_file, "/etc/j");
  EXPECT_EQ(parsed->options.tls.cert_file, "c.pem");
  EXPECT_EQ(parsed->options.tls.ca_file, "ca.pem");
}

TEST(ParseCoordinatorFlagsTest, AConfigFileUnderTheCommandLine) {
  const std::string config = testing_util::WriteTempFile(
      "coordinator.toml",
      "state_dir = \"/var/lib/slimfit\"\nlisten = \"0.0.0.0:50051\"\ntoken_file = "
      "\"/etc/slimfit/client-tokens\"\n"
      "worker_token_file = \"/etc/slimfit/join-tokens\"\n"
      "tls_cert = \"pki/coordinator.pem\"\ntls_key = \"pki/coordinator.key\"\nlost_after_ms = 8000\n");
  absl::StatusOr<ParsedCoordinatorFlags> parsed =
      ParseCoordinatorFlags({"--config", config, "--lost_after_ms=3000"}, CoordinatorEnvironment{});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const CoordinatorDaemonOptions& o = parsed->options;
  EXPECT_EQ(o.state_dir, "/var/lib/slimfit");
  EXPECT_EQ(o.listen, "0.0.0.0:50051");
  EXPECT_EQ(o.token_file, "/etc/slimfit/client-tokens");
  EXPECT_EQ(o.tls.cert_file, "pki/coordinator.pem");
  EXPECT_EQ(o.lost_after_ms, 3000);
}

TEST(ParseCoordinatorFlagsTest, HelpNeverShowsASecret) {
  absl::StatusOr<ParsedCoordinatorFlags> parsed = ParseCoordinatorFlags({"--help"}, Env());
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->help);
  EXPECT_THAT(parsed->help_text, HasSubstr("slimfit-coordinator"));
  EXPECT_THAT(parsed->help_text, HasSubstr("--worker_token"));
  EXPECT_THAT(parsed->help_text, Not(HasSubstr("client-secret")));
  EXPECT_THAT(parsed->help_text, Not(HasSubstr("worker-secret")));
}

TEST(ParseCoordinatorFlagsTest, MetricsOnLoopbackOrWithTlsOrInsecure) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--state_dir=/s", "--metrics_listen=127.0.0.1:9090", "--metrics_port_file=/tmp/m"},
           {"--state_dir=/s", "--metrics_listen=0.0.0.0:9090", "--listen=0.0.0.0:50051", "--tls_cert=c.pem",
            "--tls_key=c.key"},
           {"--state_dir=/s", "--metrics_listen=10.0.0.1:9090", "--insecure"}}) {
    absl::StatusOr<ParsedCoordinatorFlags> parsed = ParseCoordinatorFlags(args, Env());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->options.metrics_listen, args[1].substr(args[1].find('=') + 1));
  }
  absl::StatusOr<ParsedCoordinatorFlags> off = ParseCoordinatorFlags({"--state_dir=/s"}, Env());
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->options.metrics_listen.empty());
}

TEST(ParseCoordinatorFlagsTest, PreciseErrors) {
  struct Case {
    std::vector<std::string> args;
    CoordinatorEnvironment env;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{}, Env(), "--state_dir"},
      {{"--state_dir=/s"}, {}, "--token (or $SLIMFIT_TOKEN) or --token_file is required"},
      {{"--state_dir=/s", "--token=x"},
       {},
       "--worker_token (or $SLIMFIT_WORKER_TOKEN) or --worker_token_file"},
      {{"--state_dir=/s", "--listen=0.0.0.0:50051"}, Env(), "without TLS"},
      {{"--state_dir=/s", "--tls_cert=c.pem"}, Env(), "--tls_cert and --tls_key go together"},
      {{"--state_dir=/s", "--tls_ca=ca.pem"}, Env(), "--tls_ca needs --tls_cert"},
      {{"--state_dir=/s", "--token=x", "--worker_token=x"}, {}, "must differ"},
      {{"--state_dir=/s", "--listen=nowhere"}, Env(), "--listen"},
      {{"--state_dir=/s", "--heartbeat_interval_ms=5"}, Env(), "--heartbeat_interval_ms"},
      {{"--state_dir=/s", "--lost_after_ms=1500"}, Env(), "--lost_after_ms"},
      {{"--state_dir=/s", "--shard_timeout_seconds=0"}, Env(), "--shard_timeout_seconds"},
      {{"--state_dir=/s", "--max_attempts=0"}, Env(), "--max_attempts"},
      {{"--state_dir=/s", "--max_sequences_per_shard=-1"}, Env(), "--max_sequences_per_shard"},
      {{"--state_dir=/s", "--threads=0"}, Env(), "--threads=0"},
      {{"--state_dir=/s", "--port_file="}, Env(), "--port_file is empty"},
      {{"--state_dir=/s", "--frobnicate"}, Env(), "frobnicate"},
      {{"--state_dir=/s", "--metrics_listen=0.0.0.0:9090"}, Env(), "--metrics_listen) without TLS"},
      {{"--state_dir=/s", "--metrics_listen=9090"}, Env(), "--metrics_listen"},
      {{"--state_dir=/s", "--metrics_port_file=/tmp/p"}, Env(), "--metrics_port_file needs --metrics_listen"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ParsedCoordinatorFlags> parsed = ParseCoordinatorFlags(c.args, c.env);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace slimfit::server
