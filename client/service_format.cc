#include "client/service_format.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "planner/plan_proto.h"

namespace slimfit::client {
namespace {

constexpr absl::string_view kJobStatePrefix = "JOB_STATE_";
constexpr absl::string_view kWorkerStatePrefix = "WORKER_STATE_";

std::string EnumName(const std::string& full, absl::string_view prefix, int value) {
  if (full.empty()) return absl::StrCat(value);
  return absl::StartsWith(full, prefix) ? full.substr(prefix.size()) : full;
}

absl::Time ToTime(const google::protobuf::Timestamp& time) {
  return absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos());
}

bool IsUnset(const google::protobuf::Timestamp& time) { return time.seconds() == 0 && time.nanos() == 0; }

}  // namespace

std::string JobStateName(v1::JobState state) {
  return EnumName(v1::JobState_Name(state), kJobStatePrefix, state);
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

absl::StatusOr<std::vector<v1::JobState>> ParseJobStates(absl::string_view flag,
                                                         const std::vector<std::string>& names) {
  std::vector<v1::JobState> states;
  for (const std::string& name : names) {
    std::string upper = absl::AsciiStrToUpper(name);
    if (!absl::StartsWith(upper, kJobStatePrefix)) upper = absl::StrCat(kJobStatePrefix, upper);
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    if (!v1::JobState_Parse(upper, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", name,
                       ": unknown job state; expected queued, running, succeeded, failed or cancelled"));
    }
    states.push_back(state);
  }
  return states;
}

std::string WorkerStateName(v1::WorkerState state) {
  return EnumName(v1::WorkerState_Name(state), kWorkerStatePrefix, state);
}

std::string FormatTimestamp(const google::protobuf::Timestamp& time) {
  if (IsUnset(time)) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", ToTime(time), absl::UTCTimeZone());
}

std::string FormatAge(const google::protobuf::Timestamp& time, absl::Time now) {
  if (IsUnset(time)) return "-";
  const absl::Duration age = now - ToTime(time);
  if (age < absl::ZeroDuration()) return "now";
  return absl::StrCat(FormatDuration(absl::ToDoubleSeconds(age)), " ago");
}

std::string FormatLoss(std::optional<double> loss) {
  return loss.has_value() ? absl::StrFormat("%.4f", *loss) : "-";
}

std::string FormatBitsPerByte(std::optional<double> bits_per_byte) {
  return bits_per_byte.has_value() ? absl::StrFormat("%.3f bits/byte", *bits_per_byte) : "-";
}

std::string JobSummary(const v1::Job& job) {
  std::vector<std::string> parts;
  const v1::JobProgress& progress = job.progress();
  const int64_t rounds = progress.rounds() > 0 ? progress.rounds() : job.spec().rounds();
  parts.push_back(absl::StrCat("round ", progress.rounds_completed(), "/", rounds));
  if (progress.has_loss()) {
    std::string loss = absl::StrCat("loss ", FormatLoss(progress.loss()));
    if (progress.has_bits_per_byte())
      absl::StrAppend(&loss, " (", FormatBitsPerByte(progress.bits_per_byte()), ")");
    parts.push_back(loss);
  }
  if (progress.has_eval_loss()) {
    std::string eval = absl::StrCat("eval ", FormatLoss(progress.eval_loss()));
    if (progress.has_eval_bits_per_byte()) {
      absl::StrAppend(&eval, " (", FormatBitsPerByte(progress.eval_bits_per_byte()), ")");
    }
    parts.push_back(eval);
  }
  if (progress.has_tokens_per_second()) parts.push_back(FormatRate(progress.tokens_per_second()));
  if (progress.has_eta_seconds() && !IsTerminal(job.state())) {
    parts.push_back(absl::StrCat("ETA ", FormatDuration(progress.eta_seconds())));
  }
  std::string line = job.job_id();
  if (!job.spec().name().empty() && job.spec().name() != job.job_id()) {
    absl::StrAppend(&line, " \"", job.spec().name(), "\"");
  }
  absl::StrAppend(&line, ": ", JobStateName(job.state()), ", ", absl::StrJoin(parts, ", "));
  if (!job.state_reason().empty()) absl::StrAppend(&line, " (", job.state_reason(), ")");
  return line;
}

std::string ProtoToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    // Only a message with an invalid Any or a non-UTF-8 string gets here; say so in valid JSON.
    return absl::StrCat("{\"error\": \"cannot print a ", message.GetTypeName(), " as JSON\"}");
  }
  while (!json.empty() && json.back() == '\n') json.pop_back();
  return json;
}

}  // namespace slimfit::client
