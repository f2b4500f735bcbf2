// Flag parsing of slimfit-worker. The daemon itself runs in worker_main_test.
#include "worker/worker_daemon.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::worker {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Required() {
  return {"--coordinator=127.0.0.1:7000", "--memory_budget=64MiB", "--state_dir=/tmp/w"};
}

TEST(ParseWorkerFlagsTest, DefaultsAndTokenFromTheEnvironment) {
  absl::StatusOr<ParsedFlags> parsed = ParseWorkerFlags(Required(), "env-secret");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const WorkerDaemonOptions& o = parsed->options;
  EXPECT_FALSE(parsed->help);
  EXPECT_EQ(o.coordinator, "127.0.0.1:7000");
  EXPECT_EQ(o.listen, "127.0.0.1:0");
  EXPECT_EQ(o.advertise, "");
  EXPECT_EQ(o.device, "cpu");
  EXPECT_EQ(o.memory_budget_bytes, 64 << 20);
  EXPECT_EQ(o.threads, 1);
  EXPECT_TRUE(o.cuda_graphs);
  EXPECT_EQ(o.state_dir, "/tmp/w");
  EXPECT_EQ(o.token, "env-secret");
  EXPECT_EQ(o.profile, "");
  EXPECT_EQ(o.port_file, "");
}

TEST(ParseWorkerFlagsTest, EveryFlag) {
  std::vector<std::string> args = Required();
  for (const char* flag :
       {"--listen=0.0.0.0:7100", "--advertise=node7:7100", "--device=cuda:1", "--threads=4",
        "--token=flag-secret", "--profile=p.textproto", "--port_file=/tmp/port", "--tls_cert=w.pem",
        "--tls_key=w.key", "--tls_ca=ca.pem", "--cuda_graphs=false"}) {
    args.push_back(flag);
  }
  absl::StatusOr<ParsedFlags> parsed = ParseWorkerFlags(args, "env-secret");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const WorkerDaemonOptions& o = parsed->options;
  EXPECT_EQ(o.listen, "0.0.0.0:7100");
  EXPECT_EQ(o.advertise, "node7:7100");
  EXPECT_EQ(o.device, "cuda:1");
  EXPECT_EQ(o.threads, 4);
  EXPECT_FALSE(o.cuda_graphs);
  EXPECT_EQ(o.token, "flag-secret");  // the flag wins over the environment
  EXPECT_EQ(o.profile, "p.textproto");
  EXPECT_EQ(o.port_file, "/tmp/port");
  EXPECT_EQ(o.tls.cert_file, "w.pem");
  EXPECT_EQ(o.tls.key_file, "w.key");
  EXPECT_EQ(o.tls.ca_file, "ca.pem");
}

TEST(ParseWorkerFlagsTest, LocalDatasetsAndTheirFormat) {
  std::vector<std::string> args = Required();
  args.insert(args.end(), {"--data=notes=/data/notes.txt,mail=/srv/mail.tok", "--data_type=uint16",
                           "--data_separator=\\x00\\x00"});
  absl::StatusOr<ParsedFlags> parsed = ParseWorkerFlags(args, "t");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const WorkerDaemonOptions& o = parsed->options;
  ASSERT_EQ(o.local_data.size(), 2u);
  EXPECT_EQ(o.local_data[0].name, "notes");
  EXPECT_EQ(o.local_data[0].path, "/data/notes.txt");
  EXPECT_EQ(o.local_data[1].name, "mail");
  EXPECT_EQ(o.local_data_format.content_type, rpc::kTokensContentType);
  EXPECT_EQ(o.local_data_format.encoding, v1::TOKEN_ENCODING_UINT16_LE);
  EXPECT_EQ(o.local_data_format.separator, std::string("\0\0", 2));

  absl::StatusOr<ParsedFlags> none = ParseWorkerFlags(Required(), "t");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->options.local_data.empty());
  EXPECT_EQ(none->options.local_data_format.content_type, rpc::kTextContentType);
}

TEST(ParseWorkerFlagsTest, HelpNamesTheProgramAndEveryFlag) {
  absl::StatusOr<ParsedFlags> parsed = ParseWorkerFlags({"--help"}, nullptr);
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->help);
  for (const char* flag :
       {"slimfit-worker", "--coordinator", "--listen", "--advertise", "--device", "--memory_budget",
        "--threads", "--state_dir", "--token", "--profile", "--port_file", "--tls_cert", "--tls_key",
        "--tls_ca", "--insecure", "--data", "--data_type", "--data_separator"}) {
    EXPECT_THAT(parsed->help_text, HasSubstr(flag));
  }
}

TEST(ParseWorkerFlagsTest, BadFlagsAreOneLineErrorsNamingTheFlag) {
  struct Case {
    std::vector<std::string> extra;
    const char* env;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--memory_budget=lots"}, "t", "--memory_budget=lots"},
      {{"--memory_budget=0"}, "t", "--memory_budget must be more than 0"},
      {{"--threads=0"}, "t", "--threads=0"},
      {{"--listen=nowhere"}, "t", "--listen"},
      {{"--advertise=host:0"}, "t", "--advertise"},
      {{"--coordinator=host"}, "t", "--coordinator"},
      {{"--profile="}, "t", "--profile is empty"},
      {{"--frobnicate"}, "t", "unknown flag --frobnicate for 'slimfit-worker'"},
      {{"--listen=0.0.0.0:7100"}, "t", "without TLS"},
      {{"--tls_cert=w.pem"}, "t", "--tls_cert and --tls_key go together"},
      {{"--tls_ca=ca.pem"}, "t", "--tls_ca needs --tls_cert"},
      {{"--metrics_listen=0.0.0.0:9100"}, "t", "--metrics_listen) without TLS"},
      {{"--metrics_port_file=/tmp/m"}, "t", "--metrics_port_file needs --metrics_listen"},
      {{"--data=notes"}, "t", "--data: 'notes': expected NAME=PATH"},
      {{"--data=a b=/x"}, "t", "--data: 'a b=/x': a name is"},
      {{"--data=a=/x,a=/y"}, "t", "the name a is given twice"},
      {{"--data=a=/x", "--data_type=utf8"}, "t", "--data_type=utf8: expected text, uint8, uint16 or uint32"},
      {{"--data=a=/x", "--data_separator=\\q"}, "t", "--data_separator=\\q"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = Required();
    for (const std::string& extra : c.extra) {
      // A flag given again replaces the required one of the same name.
      const std::string name = extra.substr(0, extra.find('='));
      for (auto it = args.begin(); it != args.end();) {
        it = it->rfind(name + "=", 0) == 0 ? args.erase(it) : it + 1;
      }
      args.push_back(extra);
    }
    absl::StatusOr<ParsedFlags> parsed = ParseWorkerFlags(args, c.env);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.message));
    EXPECT_EQ(std::string(parsed.status().message()).find('\n'), std::string::npos);
  }
  absl::StatusOr<ParsedFlags> missing = ParseWorkerFlags({"--coordinator=127.0.0.1:1"}, "t");
  EXPECT_THAT(missing.status().message(), HasSubstr("missing --memory_budget"));
  EXPECT_THAT(missing.status().message(), HasSubstr("slimfit-worker --help"));
}

TEST(WorkerMainTest, UsageErrorExitsTwoWithOneLine) {
  std::ostringstream out, err;
  EXPECT_EQ(WorkerMain({"--threads=x"}, nullptr, out, err), 2);
  EXPECT_EQ(out.str(), "");
  const std::string error = err.str();
  EXPECT_THAT(error, ::testing::StartsWith("slimfit-worker: --threads=x"));
  EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 1);
  std::ostringstream help_out, help_err;
  EXPECT_EQ(WorkerMain({"--help"}, nullptr, help_out, help_err), 0);
  EXPECT_THAT(help_out.str(), HasSubstr("--memory_budget"));
}

}  // namespace
}  // namespace slimfit::worker
