#include "server/job_bounds.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "rpc/rpc_util.h"

namespace slimfit::server {

int64_t MaxRounds(int64_t tokens_per_round, int64_t local_steps) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (local_steps > kMax / tokens_per_round) return 0;
  return kMax / (local_steps * tokens_per_round);
}

absl::Status CheckCounterBounds(const v1::JobSpec& spec) {
  const int64_t local_steps = spec.has_local_steps() ? spec.local_steps() : 1;
  const int64_t max_rounds = MaxRounds(spec.tokens_per_round(), local_steps);
  const std::string per_round =
      local_steps > 1 ? absl::StrCat(local_steps, " local_steps of ", spec.tokens_per_round(), " tokens")
                      : absl::StrCat(spec.tokens_per_round(), " tokens");
  if (max_rounds == 0) {
    return rpc::InvalidFieldError(
        "spec.tokens_per_round",
        absl::StrCat("one round of ", per_round, " is more tokens than the job's 64-bit counters hold"));
  }
  if (spec.rounds() > max_rounds) {
    return rpc::InvalidFieldError(
        "spec.rounds",
        absl::StrCat(spec.rounds(), " rounds of ", per_round,
                     " are more tokens than the job's 64-bit counters hold (2^63 - 1); at most ", max_rounds,
                     " rounds"));
  }
  return absl::OkStatus();
}

}  // namespace slimfit::server
