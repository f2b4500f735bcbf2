// audit_job: audits a finished job from its record on the coordinator (bench/job_audit.h) — every
// round counted once, redone rounds, reassignments by cause, spot checks, quarantines — and with
// --reference compares it round by round with an undisturbed run of the same spec.
//
//   audit_job JOB [--reference=JOB] [--loss_tolerance=1e-5] [--json]
//             [--coordinator=HOST:PORT] [--token=T] [the slimfit CLI's TLS flags]
//
// --coordinator and --token default to $SLIMFIT_COORDINATOR and $SLIMFIT_TOKEN, as for `slimfit`.
// Exit status 0 when the audit passes, 1 when it finds problems (each printed) or the job has not
// finished, 2 for a usage error or an unknown job (one line "audit_job: <message>" on stderr).
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/exit_status.h"
#include "base/flags.h"
#include "bench/job_audit.h"
#include "client/coordinator_client.h"

namespace slimfit::bench {
namespace {

constexpr char kProgram[] = "audit_job";

struct Options {
  std::string job_id;
  std::string reference_job_id;
  double loss_tolerance = JobAuditOptions().loss_tolerance;
  client::CoordinatorOptions connection;
};

// The job (it must be terminal) and every event it has.
absl::StatusOr<JobAudit> Audit(const client::CoordinatorClient& client, const std::string& job_id,
                               const JobAuditOptions& options) {
  v1::GetJobRequest get;
  get.set_job_id(job_id);
  v1::Job job;
  absl::Status got =
      client.Call("GetJob", client::Idempotency::kIdempotent,
                  [&](grpc::ClientContext* context) { return client.stub().GetJob(context, get, &job); });
  if (!got.ok()) return got;
  if (job.state() != v1::JOB_STATE_SUCCEEDED && job.state() != v1::JOB_STATE_FAILED &&
      job.state() != v1::JOB_STATE_CANCELLED) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " is ", v1::JobState_Name(job.state()), ": audit it once it has finished"));
  }
  std::unique_ptr<grpc::ClientContext> context = client.StreamContext();
  v1::WatchJobRequest watch;
  watch.set_job_id(job_id);
  watch.set_from_start(true);
  std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
      client.stub().WatchJob(context.get(), watch);
  std::vector<v1::JobEvent> events;
  v1::JobEvent event;
  while (reader->Read(&event)) {
    if (!event.has_snapshot()) events.push_back(event);
  }
  if (absl::Status finished = client.Convert(reader->Finish(), "WatchJob", context.get()); !finished.ok()) {
    return finished;
  }
  return AuditJob(job, events, options);
}

nlohmann::json ToJson(const JobAudit& audit, const std::string& reference_job_id) {
  nlohmann::json redone = audit.redone_rounds;
  nlohmann::json causes = nlohmann::json::object();
  for (const auto& [cause, count] : audit.reassigned_by_cause) causes[cause] = count;
  nlohmann::json out = {{"job_id", audit.job_id},
                        {"state", v1::JobState_Name(audit.state)},
                        {"rounds", audit.rounds},
                        {"rounds_completed", audit.rounds_completed},
                        {"tokens_trained", audit.tokens_trained},
                        {"tokens_of_rounds", audit.tokens_of_rounds},
                        {"redone_rounds", redone},
                        {"largest_redo_loss_difference", audit.largest_redo_loss_difference},
                        {"resumes", audit.resumes},
                        {"checkpoints", audit.checkpoints},
                        {"reassigned_shards", audit.reassigned_shards},
                        {"reassigned_by_cause", causes},
                        {"verified_shards", audit.verified_shards},
                        {"disagreements", audit.disagreements},
                        {"quarantines", audit.quarantines},
                        {"plan_changes", audit.plan_changes},
                        {"problems", audit.problems},
                        {"passed", audit.problems.empty()}};
  if (!reference_job_id.empty()) {
    out["reference_job_id"] = reference_job_id;
    out["largest_reference_loss_difference"] = audit.largest_reference_loss_difference;
    out["largest_reference_loss_difference_round"] = audit.largest_reference_loss_difference_round;
    nlohmann::json by_round = nlohmann::json::object();
    for (const auto& [round, difference] : audit.reference_loss_differences) {
      by_round[std::to_string(round)] = difference;
    }
    out["reference_loss_difference_by_round"] = by_round;
  }
  return out;
}

void PrintText(const JobAudit& audit, const std::string& reference_job_id) {
  std::cout << absl::StrFormat(
      "%s: %s, %d/%d rounds; %d tokens trained, the sum over its %d distinct rounds %d\n", audit.job_id,
      v1::JobState_Name(audit.state), audit.rounds_completed, audit.rounds, audit.tokens_trained,
      audit.round_records.size(), audit.tokens_of_rounds);
  std::cout << absl::StrFormat(
      "rounds redone after a coordinator restart: %d%s; largest loss difference of a redo %.1e\n",
      audit.redone_rounds.size(),
      audit.redone_rounds.empty() ? "" : absl::StrCat(" (", absl::StrJoin(audit.redone_rounds, ", "), ")"),
      audit.largest_redo_loss_difference);
  std::cout << absl::StrFormat("resumes (parameter-version jumps): %d; checkpoints written: %d\n",
                               audit.resumes, audit.checkpoints);
  std::cout << "shards reassigned: " << audit.reassigned_shards << "\n";
  for (const auto& [cause, count] : audit.reassigned_by_cause)
    std::cout << absl::StrFormat("  %4d  %s\n", count, cause);
  std::cout << absl::StrFormat(
      "spot checks settled: %d (%d disagreements); quarantines: %d; plan changes: %d\n",
      audit.verified_shards, audit.disagreements, audit.quarantines, audit.plan_changes);
  if (!reference_job_id.empty()) {
    std::cout << absl::StrFormat("against %s: largest relative loss difference %.1e (round %d)\n",
                                 reference_job_id, audit.largest_reference_loss_difference,
                                 audit.largest_reference_loss_difference_round);
  }
  for (const std::string& problem : audit.problems) std::cout << "problem: " << problem << "\n";
  std::cout << (audit.problems.empty() ? std::string("audit: passed\n")
                                       : absl::StrCat("audit: ", audit.problems.size(), " problems\n"));
}

int Fail(const absl::Status& status) {
  std::cerr << base::FormatErrorLine(kProgram, status.message());
  return base::ExitCodeForStatus(status);
}

int Run(const std::vector<std::string>& args) {
  Options options;
  base::FlagSet flags(
      kProgram, "audit_job JOB [flags]",
      "Audits a finished job: every round counted once, reassignments, spot checks, quarantines.");
  flags.SetInvocation(kProgram);
  flags.Positional("JOB", &options.job_id, "the finished job to audit", base::FlagSet::kRequired);
  flags.String("reference", &options.reference_job_id, "an undisturbed run of the same spec to compare with");
  flags.Double("loss_tolerance", &options.loss_tolerance,
               "largest relative difference between two losses of one round (a redo, or the reference's)");
  client::AddCoordinatorFlags(flags, &options.connection);
  bool help = false;
  if (absl::Status parsed = client::ParseServiceFlags(flags, args, std::cout, &options.connection, &help);
      !parsed.ok()) {
    return Fail(parsed);
  }
  if (help) return base::kExitOk;
  absl::StatusOr<std::unique_ptr<client::CoordinatorClient>> client =
      client::CoordinatorClient::Create(options.connection);
  if (!client.ok()) return Fail(client.status());
  JobAuditOptions audit_options;
  audit_options.loss_tolerance = options.loss_tolerance;
  absl::StatusOr<JobAudit> audit = Audit(**client, options.job_id, audit_options);
  if (!audit.ok()) return Fail(audit.status());
  if (!options.reference_job_id.empty()) {
    absl::StatusOr<JobAudit> reference = Audit(**client, options.reference_job_id, audit_options);
    if (!reference.ok()) return Fail(reference.status());
    if (!reference->problems.empty()) {
      return Fail(
          absl::FailedPreconditionError(absl::StrCat("the reference ", options.reference_job_id,
                                                     " fails its own audit: ", reference->problems.front())));
    }
    CompareWithReference(*reference, audit_options, &*audit);
  }
  if (options.connection.json) {
    std::cout << ToJson(*audit, options.reference_job_id).dump() << "\n";
  } else {
    PrintText(*audit, options.reference_job_id);
  }
  return audit->problems.empty() ? base::kExitOk : base::kExitFailure;
}

}  // namespace
}  // namespace slimfit::bench

int main(int argc, char** argv) {
  return slimfit::bench::Run(std::vector<std::string>(argv + 1, argv + argc));
}
