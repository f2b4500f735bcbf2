#include "client/jobs_command.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "client/coordinator_client.h"
#include "client/service_format.h"
#include "client/text_table.h"

namespace slimfit::client {

absl::Status RunJobsCommand(absl::Span<const std::string> args, std::ostream& out) {
  std::vector<std::string> state_names;
  int64_t limit = 50;
  CoordinatorOptions connection;
  base::FlagSet flags("jobs",
                      "slimfit jobs [--state=STATE[,STATE...]] [--limit=N] [--json] [coordinator flags]",
                      "The coordinator's jobs, newest first: id, name, state, rounds, loss, bits per byte,\n"
                      "created.");
  flags.StringList("state", &state_names,
                   "only jobs in these states: queued, running, succeeded, failed, cancelled");
  flags.Int("limit", &limit, "list at most this many jobs (0: all)");
  AddCoordinatorFlags(flags, &connection);
  bool help = false;
  if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;
  absl::StatusOr<std::vector<v1::JobState>> states = ParseJobStates("state", state_names);
  if (!states.ok()) return states.status();
  if (limit < 0)
    return absl::InvalidArgumentError(absl::StrCat("--limit=", limit, ": expected 0 (all) or more"));
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
  if (!client.ok()) return client.status();

  v1::ListJobsResponse listed;
  v1::ListJobsRequest request;
  for (v1::JobState state : *states) request.add_states(state);
  PageTokens pages("ListJobs");
  for (;;) {
    const int64_t wanted = limit == 0 ? v1::LIMIT_MAX_PAGE_SIZE : limit - listed.jobs_size();
    request.set_page_size(static_cast<int32_t>(std::min<int64_t>(wanted, v1::LIMIT_MAX_PAGE_SIZE)));
    v1::ListJobsResponse page;
    absl::Status status = (*client)->Call(
        "ListJobs", Idempotency::kIdempotent,
        [&](grpc::ClientContext* context) { return (*client)->stub().ListJobs(context, request, &page); });
    if (!status.ok()) return status;
    for (v1::Job& job : *page.mutable_jobs()) {
      if (limit != 0 && listed.jobs_size() >= limit) break;
      *listed.add_jobs() = std::move(job);
    }
    if (page.next_page_token().empty()) break;
    if (absl::Status fresh = pages.Next(page.next_page_token()); !fresh.ok()) return fresh;
    request.set_page_token(page.next_page_token());
    if (limit != 0 && listed.jobs_size() >= limit) {
      listed.set_next_page_token(page.next_page_token());
      break;
    }
  }

  if (connection.json) {
    out << ProtoToJson(listed, /*pretty=*/true) << "\n";
    return absl::OkStatus();
  }
  if (listed.jobs_size() == 0) {
    out << (states->empty() ? "no jobs\n" : "no jobs in these states\n");
    return absl::OkStatus();
  }
  TextTable table({{"ID"},
                   {"NAME"},
                   {"STATE"},
                   {"ROUNDS", TextTable::kRight},
                   {"LOSS", TextTable::kRight},
                   {"BITS/BYTE", TextTable::kRight},
                   {"CREATED"}});
  for (const v1::Job& job : listed.jobs()) {
    const v1::JobProgress& progress = job.progress();
    const int64_t rounds = progress.rounds() > 0 ? progress.rounds() : job.spec().rounds();
    table.AddRow({job.job_id(), job.spec().name().empty() ? "-" : job.spec().name(),
                  JobStateName(job.state()), absl::StrCat(progress.rounds_completed(), "/", rounds),
                  progress.has_loss() ? FormatLoss(progress.loss()) : "-",
                  progress.has_bits_per_byte() ? absl::StrFormat("%.3f", progress.bits_per_byte()) : "-",
                  FormatTimestamp(job.created_at())});
  }
  out << table.Render();
  if (!listed.next_page_token().empty()) {
    out << "(more jobs: raise --limit, or --limit=0 for all)\n";
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
