// How the service commands (status, watch, jobs, workers, submit, cancel) show slimfit.v1
// messages: state names, durations, rates, times, one-line job summaries, and the proto3 JSON
// their --json prints.
//
// Conventions: a value the coordinator did not send (an absent optional field, an unset
// timestamp) shows as "-". Losses have four decimals, bits per byte three.
//
// Thread safety: pure functions (FormatAge reads no clock: the caller passes `now`).
#ifndef SLIMFIT_CLIENT_SERVICE_FORMAT_H_
#define SLIMFIT_CLIENT_SERVICE_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/human_format.h"
#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"
#include "planner/plan_proto.h"
#include "proto/slimfit.pb.h"

namespace slimfit::client {

// "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED" ("UNSPECIFIED" for 0, the number for a
// value newer than this client).
std::string JobStateName(v1::JobState state);
// SUCCEEDED, FAILED or CANCELLED.
bool IsTerminal(v1::JobState state);
// "queued", "RUNNING", "job_state_running" → JOB_STATE_RUNNING; each of `names` one state.
// INVALID_ARGUMENT naming --<flag> and listing the states for anything else.
absl::StatusOr<std::vector<v1::JobState>> ParseJobStates(absl::string_view flag,
                                                         const std::vector<std::string>& names);

// "IDLE", "BUSY", "DRAINING", "LOST", "LEFT".
std::string WorkerStateName(v1::WorkerState state);

// Durations, rates and counts (base/human_format.h).
using base::FormatCount;
using base::FormatDuration;
using base::FormatRate;
// "2024-05-01 12:34:56 UTC"; "-" for an unset timestamp.
std::string FormatTimestamp(const google::protobuf::Timestamp& time);
// "5s ago", "3m 12s ago"; "-" for an unset timestamp; "now" for a time after `now`.
std::string FormatAge(const google::protobuf::Timestamp& time, absl::Time now);
// "2.3456"; "-" when absent.
std::string FormatLoss(std::optional<double> loss);
// "3.384 bits/byte"; "-" when absent.
std::string FormatBitsPerByte(std::optional<double> bits_per_byte);

// One line: `job-000017 "tiny": RUNNING, round 14/200, loss 2.3456 (3.384 bits/byte), 12.3k
// tokens/s, ETA 1h 02m (waiting for 2 eligible workers (1 live))`. Parts the job does not have yet
// are left out.
std::string JobSummary(const v1::Job& job);

// The wire plan in one line (planner/plan_proto.h).
using planner::PlanSummaryOf;

// The canonical proto3 JSON mapping with the .proto field names (snake_case), enums by name,
// fields at their zero value included, 64-bit integers as strings. `pretty`: indented over several
// lines; otherwise one line (for JSON lines). No trailing newline.
std::string ProtoToJson(const google::protobuf::Message& message, bool pretty);

}  // namespace slimfit::client

#endif  // SLIMFIT_CLIENT_SERVICE_FORMAT_H_
