// Test-only: a valid RegisterWorkerRequest for a CPU worker (a plausible calibrated profile,
// loopback address, one thread) with the given memory budget, for tests of the registry and of
// what reads it.
#ifndef SLIMFIT_SERVER_TEST_WORKER_REQUEST_H_
#define SLIMFIT_SERVER_TEST_WORKER_REQUEST_H_

#include <cstdint>

#include "proto/slimfit.pb.h"

namespace slimfit::server {

inline v1::RegisterWorkerRequest TestWorkerRequest(int64_t budget_bytes = int64_t{64} << 20) {
  v1::RegisterWorkerRequest request;
  request.mutable_profile()->set_device("cpu");
  request.mutable_profile()->set_threads(1);
  request.mutable_profile()->set_total_memory_bytes(int64_t{1} << 30);
  request.mutable_profile()->set_activation_scale(1);
  request.mutable_profile()->set_flops_per_second(1e10);
  request.mutable_profile()->set_half_rate_rows(16);
  request.mutable_profile()->set_backward_factor(2);
  request.set_memory_budget_bytes(budget_bytes);
  request.set_device("cpu");
  request.set_advertise_address("127.0.0.1:5000");
  request.set_threads(1);
  return request;
}

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_TEST_WORKER_REQUEST_H_
