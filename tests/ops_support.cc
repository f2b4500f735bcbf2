#include "tests/ops_support.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/test_util.h"
#include "tests/e2e_support.h"

namespace slimfit::testing_util {

MetricsEndpoint MetricsFlags(const std::string& name) {
  MetricsEndpoint endpoint;
  endpoint.port_file = TempPath(absl::StrCat(name, ".metrics-port"));
  endpoint.flags = {"--metrics_listen=127.0.0.1:0", absl::StrCat("--metrics_port_file=", endpoint.port_file)};
  return endpoint;
}

absl::StatusOr<HttpReply> HttpGet(const std::string& address, const std::string& path,
                                  const std::map<std::string, std::string>& headers) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("not host:port: ", address));
  }
  httplib::Client client(address.substr(0, colon), port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(30));
  httplib::Headers sent;
  for (const auto& [name, value] : headers) sent.emplace(name, value);
  httplib::Result result = client.Get(path.c_str(), sent);
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat("GET http://", address, path, ": ", httplib::to_string(result.error())));
  }
  return HttpReply{result->status, result->get_header_value("Content-Type"), result->body};
}

absl::StatusOr<v1::Job> SubmitSmallJob(Cluster& cluster, int64_t rounds) {
  absl::StatusOr<std::string> dataset = cluster.UploadText(Corpus(30000), std::string("\n\n"));
  if (!dataset.ok()) return dataset.status();
  return cluster.Submit(
      Spec(*dataset, /*d_model=*/16, /*d_ff=*/32, /*seq_len=*/64, /*sequences_per_round=*/4, rounds));
}

absl::StatusOr<v1::Job> WaitForRounds(Cluster& cluster, const std::string& job_id, int64_t rounds,
                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<v1::Job> job = cluster.GetJob(job_id);
    if (absl::IsUnavailable(job.status()) && absl::Now() < deadline) {  // a busy machine's slow connect
      absl::SleepFor(absl::Milliseconds(200));
      continue;
    }
    if (!job.ok()) return job.status();
    if (job->progress().rounds_completed() >= rounds || job->state() == v1::JOB_STATE_SUCCEEDED ||
        job->state() == v1::JOB_STATE_FAILED || job->state() == v1::JOB_STATE_CANCELLED) {
      return job;
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          job_id, " completed ", job->progress().rounds_completed(), " rounds, not ", rounds, ", in time"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

}  // namespace slimfit::testing_util
