// A job's history so far, without following it: every retained event up to the moment of the
// request (WatchJob with from_start, read until the event the snapshot says it includes, then the
// stream is cancelled), from which `slimfit status --svg` draws the loss curves (status_views/loss_curves.h).
//
// Thread safety: functions; ReadJobHistory uses the client as its callers do (one call at a time).
#ifndef SLIMFIT_CLIENT_JOB_HISTORY_H_
#define SLIMFIT_CLIENT_JOB_HISTORY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "proto/slimfit.pb.h"

namespace slimfit::client {

// The snapshot first, then every event with a sequence up to the snapshot's. WatchJob's errors
// (NOT_FOUND for an unknown job, ...), converted as the other commands convert them.
absl::StatusOr<std::vector<v1::JobEvent>> ReadJobHistory(const CoordinatorClient& client,
                                                         const std::string& job_id);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_JOB_HISTORY_H_
