// What the tests of the operator endpoints share: flags that turn on a daemon's metrics endpoint on
// a free loopback port, HTTP GETs against it, and a job kept running on a cluster. Test-only.
#ifndef SLIMFIT_TESTS_OPS_SUPPORT_H_
#define SLIMFIT_TESTS_OPS_SUPPORT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/slimfit.pb.h"
#include "tests/cluster.h"

namespace slimfit::testing_util {

// --metrics_listen on a free loopback port and --metrics_port_file where the daemon writes it.
struct MetricsEndpoint {
  std::vector<std::string> flags;
  std::string port_file;
};
// `name` keeps the port files of several daemons apart.
MetricsEndpoint MetricsFlags(const std::string& name);

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
};
// GET http://<address><path> with `headers`; UNAVAILABLE when nothing answers.
absl::StatusOr<HttpReply> HttpGet(const std::string& address, const std::string& path,
                                  const std::map<std::string, std::string>& headers = {});

// Uploads a corpus and submits a small job (2 layers, d_model 16, L = 64, 4 sequences per round) of
// `rounds` rounds; the job.
absl::StatusOr<v1::Job> SubmitSmallJob(Cluster& cluster, int64_t rounds);

// Polls until the job has completed `rounds` rounds (or is terminal): the job as last seen. An
// unreachable coordinator is asked again until `timeout`.
absl::StatusOr<v1::Job> WaitForRounds(Cluster& cluster, const std::string& job_id, int64_t rounds,
                                      absl::Duration timeout);

}  // namespace slimfit::testing_util

#endif  // SLIMFIT_TESTS_OPS_SUPPORT_H_
