#include "client/workers_command.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/flags.h"
#include "client/coordinator_client.h"
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
  std::string text = table.Render();
  for (const v1::WorkerInfo& worker : workers.workers()) {
    // Datasets that stay on the worker: what it announced, never their bytes.
    for (const v1::LocalDataset& dataset : worker.local_datasets()) {
      absl::StrAppend(&text, worker.worker_id(), " holds ", dataset.name(), ": ", dataset.tokens(),
                      " tokens in ", dataset.documents(),
                      dataset.documents() == 1 ? " document" : " documents", ", sha256 ",
                      dataset.sha256().substr(0, 12), "\n");
    }
    if (worker.state() == v1::WORKER_STATE_REVOKED) {
      absl::StrAppend(&text, worker.worker_id(), " revoked ", FormatAge(worker.revoked_at(), now), ": ",
                      worker.revoked_reason(), "\n");
    }
    for (const v1::Quarantine& quarantine : worker.quarantines()) {
      absl::StrAppend(&text, worker.worker_id(), " quarantined from ", quarantine.job_id(), " ",
                      FormatAge(quarantine.since(), now), ": ", quarantine.reason(), "\n");
    }
  }
  return text;
}

namespace {

absl::Status RunRevoke(absl::Span<const std::string> args, std::ostream& out) {
  std::string worker_id, reason;
  CoordinatorOptions connection;
  base::FlagSet flags(
      "workers revoke", "slimfit workers revoke ID [--reason=TEXT] [coordinator flags]",
      "Revokes a worker: its calls are refused from now on, its shards are reassigned, and its\n"
      "credential can never register again (it may only join anew, with a join token, under a\n"
      "new id). Survives coordinator restarts.");
  flags.Positional("ID", &worker_id, "worker id (from 'slimfit workers')", base::FlagSet::kRequired);
  flags.String("reason", &reason, "why, shown by 'slimfit workers' and logged",
               base::FlagSet::kOptionalNoDefault);
  AddCoordinatorFlags(flags, &connection);
  bool help = false;
  if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
  if (!client.ok()) return client.status();
  v1::RevokeWorkerRequest request;
  request.set_worker_id(worker_id);
  request.set_reason(reason);
  v1::WorkerInfo revoked;
  absl::Status status =
      (*client)->Call("RevokeWorker", Idempotency::kIdempotent, [&](grpc::ClientContext* context) {
        return (*client)->stub().RevokeWorker(context, request, &revoked);
      });
  if (!status.ok()) return status;
  if (connection.json) {
    out << ProtoToJson(revoked, /*pretty=*/true) << "\n";
  } else {
    out << "revoked " << revoked.worker_id() << ": " << revoked.revoked_reason() << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunWorkersCommand(absl::Span<const std::string> args, std::ostream& out) {
  if (!args.empty() && args[0] == "revoke") return RunRevoke(args.subspan(1), out);
  bool all = false;
  CoordinatorOptions connection;
  base::FlagSet flags(
      "workers",
      "slimfit workers [--all] [--json] [coordinator flags]\n       slimfit workers revoke ID "
      "[--reason=TEXT]",
      "The coordinator's workers: device, memory budget, state, the plan each runs per job\n"
      "(slice C and policies) with predicted and measured tokens per second, the age of the\n"
      "last heartbeat, and the datasets each holds on its own storage (--data).");
  flags.Bool("all", &all, "include LOST, LEFT and REVOKED workers");
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
    out << (all ? "no workers have registered\n"
                : "no live workers (--all lists lost, departed and revoked ones)\n");
  } else {
    out << FormatWorkersTable(listed, absl::Now());
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
