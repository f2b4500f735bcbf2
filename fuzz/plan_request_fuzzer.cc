// Fuzz target: the Worker.Plan RPC's request (worker/plan_request.h ValidatePlanRequest) and the
// plan search the worker then runs with its own profile (planner/plan_proto.h SearchMemoryPlan).
//
// Input: a binary slimfit.v1.PlanRequest. Invariants:
//   - a refusal is INVALID_ARGUMENT naming the field (message prefix and ErrorDetail.field);
//   - the search of an accepted request succeeds or refuses with INVALID_ARGUMENT (anything else
//     becomes INTERNAL at the RPC edge);
//   - an answer has exactly one of `chosen` and `refusal`; a chosen plan validates for the
//     sequence length and its predicted peak fits the usable budget; the frontier holds at most
//     LIMIT_MAX_FRONTIER entries by increasing peak; the full back-propagation baseline is there.
// Under AddressSanitizer (scripts/fuzz.sh) the search runs for requests of at most 512 tokens
// only: its dp programs cost ~0.5 s at 2,366 tokens in an optimised build and 29 s under ASan (a
// 240 s fuzz run's timeout, corpus/plan_request/finding-search_of_2366_tokens_slow_under_asan);
// longer requests are validated there and not searched. Without it (the corpus test in the
// ordinary suite) requests up to 4,096 tokens are searched.
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "fuzz/fuzz_support.h"
#include "planner/device_profile.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "worker/plan_request.h"

namespace {
#if defined(__SANITIZE_ADDRESS__)
constexpr int64_t kMaxSearchedTokens = 512;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int64_t kMaxSearchedTokens = 512;
#else
constexpr int64_t kMaxSearchedTokens = 4096;
#endif
#else
constexpr int64_t kMaxSearchedTokens = 4096;
#endif
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace slimfit;  // NOLINT
  v1::PlanRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;
  constexpr int64_t kWorkerBudget = int64_t{64} << 20;
  absl::StatusOr<planner::PlanSearchRequest> search = worker::ValidatePlanRequest(request, kWorkerBudget);
  if (!search.ok()) {
    SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(search.status()), search.status().ToString());
    std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(search.status());
    SLIMFIT_FUZZ_CHECK(detail.has_value() && !detail->field().empty() &&
                           absl::StartsWith(search.status().message(), detail->field()),
                       "refusal does not name its field: ", search.status().ToString());
    return 0;
  }
  if (request.sequence_length() > kMaxSearchedTokens) return 0;
  const bool include_frontier = request.has_include_frontier() ? request.include_frontier() : true;
  absl::StatusOr<v1::MemoryPlan> plan =
      planner::SearchMemoryPlan(*search, planner::DeviceProfile(), include_frontier);
  if (!plan.ok()) {
    SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(plan.status()), plan.status().ToString());
    return 0;
  }
  SLIMFIT_FUZZ_CHECK(plan->has_chosen() != plan->has_refusal(), plan->ShortDebugString());
  SLIMFIT_FUZZ_CHECK(plan->has_full_backprop(), "no full back-propagation baseline");
  SLIMFIT_FUZZ_CHECK(plan->frontier_size() <= v1::LIMIT_MAX_FRONTIER, plan->frontier_size(),
                     " frontier entries");
  for (int i = 1; i < plan->frontier_size(); ++i) {
    SLIMFIT_FUZZ_CHECK(
        plan->frontier(i).prediction().peak_bytes() > plan->frontier(i - 1).prediction().peak_bytes(),
        "frontier not by increasing peak at ", i);
  }
  if (plan->has_chosen()) {
    absl::StatusOr<planner::PlanCandidate> chosen = planner::CandidateFromProto(plan->chosen(), "chosen");
    SLIMFIT_FUZZ_CHECK(chosen.ok(), chosen.status().ToString());
    const absl::Status valid = chosen->plan.Validate(request.sequence_length());
    SLIMFIT_FUZZ_CHECK(valid.ok(), "chosen plan does not validate: ", valid.ToString());
    SLIMFIT_FUZZ_CHECK(chosen->prediction.peak_bytes <= plan->usable_bytes(), "chosen plan predicts ",
                       chosen->prediction.peak_bytes, " bytes of ", plan->usable_bytes(), " usable");
  } else {
    SLIMFIT_FUZZ_CHECK(plan->has_least_peak_bytes() && plan->least_peak_bytes() > plan->usable_bytes(),
                       "refusal without a least peak above the usable budget: ", plan->ShortDebugString());
  }
  return 0;
}
