#include "client/workers_command.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "base/flags.h"
#include "client/service_format.h"
#include "client/text_table.h"
#include "planner/plan_search.h"

namespace slimfit::client {
namespace {

std::string Rate(double tokens_per_second) {
  const std::string rate = FormatRate(tokens_per_second);
  return rate.substr(0, rate.find(" tokens/s"));
}

}  // namespace

std::string FormatWorkersTable(const v1::ListWorkersResponse& workers, absl::Time now) {
  TextTable table({{"ID"},
                   {"DEVICE"},
                   {"BUDGET", TextTable::kRight},
                   {"STATE"},
                   {"JOB"},
                   {"PLAN"},
                   {"PRED TOK/S", TextTable::kRight},
                   {"MEAS TOK/S", TextTable::kRight},
                   {"HEARTBEAT"}});
  for (const v1::WorkerInfo& worker : workers.workers()) {
    const std::vector<std::string> identity = {
        worker.worker_id(), worker.device(),
        planner::HumanBytes(static_cast<double>(worker.memory_budget_bytes())),
        WorkerStateName(worker.state())};
    const std::string heartbeat = FormatAge(worker.last_heartbeat_at(), now);
    if (worker.plans_size() == 0) {
      std::vector<std::string> row = identity;
      row.insert(row.end(), {"-", "-", "-", "-", heartbeat});
      table.AddRow(std::move(row));
      continue;
    }
    bool first = true;
    for (const v1::WorkerJobPlan& plan : worker.plans()) {
      std::vector<std::string> row = first ? identity : std::vector<std::string>(identity.size(), "");
      row.insert(row.end(),
                 {plan.job_id(), PlanSummaryOf(plan.plan().plan()), Rate(plan.predicted_tokens_per_second()),
                  plan.has_measured_tokens_per_second() ? Rate(plan.measured_tokens_per_second()) : "-",
                  first ? heartbeat : ""});
      table.AddRow(std::move(row));
      first = false;
    }
  }
  return table.Render();
}

absl::Status RunWorkersCommand(absl::Span<const std::string> args, std::ostream& out) {
  bool all = false;
  CoordinatorOptions connection;
  base::FlagSet flags("workers", "slimfit workers [--all] [--json] [coordinator flags]",
                "The coordinator's workers: device, memory budget, state, the plan each runs per job\n"
                "(slice C and policies) with predicted and measured tokens per second, and the age of\n"
                "the last heartbeat.");
  flags.Bool("all", &all, "include LOST and LEFT workers");
  AddCoordinatorFlags(flags, &connection);
  bool help = false;
  if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
  if (!client.ok()) return client.status();

  v1::ListWorkersResponse listed;
  v1::ListWorkersRequest request;
  request.set_page_size(v1::LIMIT_MAX_PAGE_SIZE);
  request.set_include_gone(all);
  PageTokens pages("ListWorkers");
  for (;;) {
    v1::ListWorkersResponse page;
    absl::Status status = (*client)->Call(
        "ListWorkers", Idempotency::kIdempotent,
        [&](grpc::ClientContext* context) { return (*client)->stub().ListWorkers(context, request, &page); });
    if (!status.ok()) return status;
    for (v1::WorkerInfo& worker : *page.mutable_workers()) *listed.add_workers() = std::move(worker);
    if (page.next_page_token().empty()) break;
    if (absl::Status fresh = pages.Next(page.next_page_token()); !fresh.ok()) return fresh;
    request.set_page_token(page.next_page_token());
  }

  if (connection.json) {
    out << ProtoToJson(listed, /*pretty=*/true) << "\n";
  } else if (listed.workers_size() == 0) {
    out << (all ? "no workers have registered\n" : "no live workers (--all lists lost and departed ones)\n");
  } else {
    out << FormatWorkersTable(listed, absl::Now());
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
