#include "bench/job_audit.h"

#include <cmath>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace slimfit::bench {
namespace {

double RelativeDifference(double a, double b) {
  const double scale = std::max(std::abs(a), std::abs(b));
  return scale > 0 ? std::abs(a - b) / scale : 0;
}

}  // namespace

std::string ReassignmentCause(const std::string& reason) {
  static const std::regex kWorkerId("w-[0-9a-f]{8}");
  static const std::regex kAddress(
      "(ipv4:|ipv6:)?(\\[[0-9a-f:]+\\]|[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+):[0-9]+");
  std::string cause = std::regex_replace(reason, kWorkerId, "w-…");
  cause = std::regex_replace(cause, kAddress, "HOST:PORT");
  constexpr size_t kLongest = 120;
  if (cause.size() > kLongest) cause = cause.substr(0, kLongest) + "…";
  return cause;
}

JobAudit AuditJob(const v1::Job& job, const std::vector<v1::JobEvent>& events,
                  const JobAuditOptions& options) {
  JobAudit audit;
  audit.job_id = job.job_id();
  audit.state = job.state();
  audit.rounds = job.spec().rounds();
  audit.rounds_completed = job.progress().rounds_completed();
  audit.tokens_trained = job.progress().tokens_trained();

  uint64_t previous_version = 0;
  for (const v1::JobEvent& event : events) {
    if (event.has_round_completed()) {
      const v1::RoundCompleted& done = event.round_completed();
      if (previous_version != 0 && done.parameter_version() != previous_version + 1) ++audit.resumes;
      previous_version = done.parameter_version();
      auto [it, first] = audit.round_records.try_emplace(done.round());
      RoundRecord& record = it->second;
      ++record.completions;
      if (first) {
        record.tokens = done.tokens();
        record.loss = done.loss();
        continue;
      }
      audit.redone_rounds.push_back(done.round());
      const double difference = RelativeDifference(done.loss(), record.loss);
      audit.largest_redo_loss_difference = std::max(audit.largest_redo_loss_difference, difference);
      if (done.tokens() != record.tokens) {
        audit.problems.push_back(absl::StrCat("round ", done.round(), " was redone with ", done.tokens(),
                                              " tokens; its first completion had ", record.tokens));
      }
      if (difference > options.loss_tolerance) {
        audit.problems.push_back(
            absl::StrFormat("round %d was redone with loss %.9g; its first completion had %.9g (relative "
                            "difference %.2e > %.1e): "
                            "the redo did not start from the same parameters",
                            done.round(), done.loss(), record.loss, difference, options.loss_tolerance));
      }
    } else if (event.has_checkpoint_written()) {
      ++audit.checkpoints;
    } else if (event.has_shard_reassigned()) {
      ++audit.reassigned_shards;
      ++audit.reassigned_by_cause[ReassignmentCause(event.shard_reassigned().reason())];
    } else if (event.has_shard_verified()) {
      ++audit.verified_shards;
      if (!event.shard_verified().agreed()) {
        ++audit.disagreements;
        audit.problems.push_back(absl::StrFormat(
            "round %d shard %d: a spot check found two workers disagreeing (relative difference %.2e, "
            "tolerance %.1e)",
            event.shard_verified().round(), event.shard_verified().shard_id(),
            event.shard_verified().relative_difference(), event.shard_verified().tolerance()));
      }
    } else if (event.has_worker_quarantined()) {
      ++audit.quarantines;
      audit.problems.push_back(absl::StrCat("worker ", event.worker_quarantined().worker_id(),
                                            " was quarantined in round ", event.worker_quarantined().round(),
                                            ": ", event.worker_quarantined().reason()));
    } else if (event.has_worker_plan_changed()) {
      ++audit.plan_changes;
    }
  }

  if (audit.state != v1::JOB_STATE_SUCCEEDED) {
    audit.problems.push_back(
        absl::StrCat("the job is ", v1::JobState_Name(audit.state), ": ", job.state_reason()));
  }
  if (audit.rounds_completed != audit.rounds) {
    audit.problems.push_back(absl::StrCat("the job completed ", audit.rounds_completed,
                                          " rounds; its spec asks for ", audit.rounds));
  }
  std::vector<int64_t> missing;
  for (int64_t round = 1; round <= audit.rounds; ++round) {
    if (audit.round_records.count(round) == 0) missing.push_back(round);
  }
  if (!missing.empty()) {
    audit.problems.push_back(
        absl::StrCat(missing.size(), " rounds have no RoundCompleted event, the first ", missing.front()));
  }
  for (const auto& [round, record] : audit.round_records) audit.tokens_of_rounds += record.tokens;
  if (audit.tokens_of_rounds != audit.tokens_trained) {
    audit.problems.push_back(absl::StrCat("the job counts ", audit.tokens_trained,
                                          " tokens trained; its distinct rounds hold ",
                                          audit.tokens_of_rounds, ": a round was counted twice or lost"));
  }
  return audit;
}

void CompareWithReference(const JobAudit& reference, const JobAuditOptions& options, JobAudit* audit) {
  if (audit->rounds != reference.rounds) {
    audit->problems.push_back(absl::StrCat("the job has ", audit->rounds, " rounds; the reference ",
                                           reference.job_id, " has ", reference.rounds));
  }
  if (audit->tokens_trained != reference.tokens_trained) {
    audit->problems.push_back(absl::StrCat("the job trained on ", audit->tokens_trained,
                                           " tokens; the reference ", reference.job_id, " on ",
                                           reference.tokens_trained));
  }
  int64_t tokens_differ = 0;
  for (const auto& [round, record] : audit->round_records) {
    auto it = reference.round_records.find(round);
    if (it == reference.round_records.end()) continue;  // a missing round is reported by AuditJob
    if (record.tokens != it->second.tokens && tokens_differ++ == 0) {
      audit->problems.push_back(absl::StrCat("round ", round, " holds ", record.tokens,
                                             " tokens; the reference's ", it->second.tokens));
    }
    const double difference = RelativeDifference(record.loss, it->second.loss);
    audit->reference_loss_differences[round] = difference;
    if (difference > audit->largest_reference_loss_difference) {
      audit->largest_reference_loss_difference = difference;
      audit->largest_reference_loss_difference_round = round;
    }
  }
  if (audit->largest_reference_loss_difference > options.loss_tolerance) {
    const int64_t round = audit->largest_reference_loss_difference_round;
    audit->problems.push_back(absl::StrFormat(
        "round %d's loss %.9g differs from the reference's %.9g by %.2e (relative; tolerance %.1e)", round,
        audit->round_records.at(round).loss, reference.round_records.at(round).loss,
        audit->largest_reference_loss_difference, options.loss_tolerance));
  }
}

}  // namespace slimfit::bench
