#include "client/cancel_command.h"

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "client/coordinator_client.h"
#include "client/service_format.h"

namespace slimfit::client {

absl::Status RunCancelCommand(absl::Span<const std::string> args, std::ostream& out) {
  std::string job_id;
  std::string reason;
  CoordinatorOptions connection;
  base::FlagSet flags("cancel", "slimfit cancel JOB [--reason=TEXT] [--json] [coordinator flags]",
                      "Cancels a queued or running job. Its last checkpoint stays exportable.");
  flags.Positional("JOB", &job_id, "job id", base::FlagSet::kRequired);
  flags.String("reason", &reason, "why, recorded in the job's state reason (at most 1024 bytes)",
               base::FlagSet::kOptionalNoDefault);
  AddCoordinatorFlags(flags, &connection);
  bool help = false;
  if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;
  if (reason.size() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("--reason: ", reason.size(), " bytes; at most 1024"));
  }
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
  if (!client.ok()) return client.status();
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::Job job;
  absl::Status status = (*client)->Call(
      "CancelJob", Idempotency::kIdempotent,
      [&](grpc::ClientContext* context) { return (*client)->stub().CancelJob(context, request, &job); });
  if (absl::IsDeadlineExceeded(status)) {
    // The coordinator answers DEADLINE_EXCEEDED itself, just before --timeout, when the job has not
    // stopped by then; without its answer this client cannot tell whether the request arrived.
    const bool requested = absl::StrContains(status.message(), "cancellation requested");
    return absl::DeadlineExceededError(absl::StrCat(
        requested ? status.message()
                  : absl::StrCat("no answer within --timeout=", connection.timeout_seconds, "s (",
                                 status.message(), "); the cancellation may not have been requested"),
        ". Run `slimfit cancel ", job_id,
        "` again to wait again (cancelling twice is harmless), or `slimfit watch ", job_id,
        "` to follow the job until it stops"));
  }
  if (!status.ok()) return status;
  if (connection.json) {
    out << ProtoToJson(job, /*pretty=*/true) << "\n";
  } else {
    out << "cancelled " << JobSummary(job) << "\n";
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
