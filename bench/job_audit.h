// What a finished job's record says about how it ran: whether every round counted exactly once,
// which rounds were redone after a coordinator restart, what happened to shards (reassignments by
// cause, spot checks, quarantines) — and, given an undisturbed run of the same spec, whether the
// two agree round by round. scripts/chaos.sh audits the job it disturbed with it (bench/job_audit
// is the command; this is the logic, on a Job and its events, with no RPCs).
//
// Example:
//   JobAudit audit = AuditJob(job, events, JobAuditOptions());
//   CompareWithReference(AuditJob(calm_job, calm_events, {}), JobAuditOptions(), &audit);
//   if (!audit.problems.empty()) ...;   // each a line saying what is wrong
//
// What counts as a problem (each one line in `problems`):
//   - the job did not SUCCEED, or completed another number of rounds than its spec says;
//   - a round in 1..rounds has no RoundCompleted event;
//   - the job's tokens_trained is not the sum of the tokens of each distinct round (a round
//     counted twice, or one lost, would break this);
//   - a redone round (completed again after a coordinator restart resumed from an earlier
//     checkpoint) had other tokens, or a loss further than options.loss_tolerance (relative) from
//     its first completion: the redo must start from the parameters the first one started from;
//   - a worker was quarantined, or a spot check found two workers disagreeing (the workers here
//     are honest: disturbing them must not look like lying);
//   - against a reference run: another number of rounds or tokens_trained, a round with other
//     tokens, or a round's loss further than options.loss_tolerance from the reference's.
//
// Thread safety: free functions on caller-owned values.
#ifndef SLIMFIT_BENCH_JOB_AUDIT_H_
#define SLIMFIT_BENCH_JOB_AUDIT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/slimfit.pb.h"

namespace slimfit::bench {

struct JobAuditOptions {
  // Largest relative difference accepted between two losses of the same round (a redo, or the
  // reference run's). Exact plans differ only by rounding: ~1e-7 in float32.
  double loss_tolerance = 1e-5;
};

// The first completion of one round.
struct RoundRecord {
  int64_t tokens = 0;
  double loss = 0;
  int completions = 0;  // 1, or more when the round was redone
};

struct JobAudit {
  std::string job_id;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  int64_t rounds = 0;                            // the spec's
  int64_t rounds_completed = 0;                  // the job's progress
  int64_t tokens_trained = 0;                    // the job's progress
  int64_t tokens_of_rounds = 0;                  // Σ tokens over distinct completed rounds
  std::map<int64_t, RoundRecord> round_records;  // by round
  std::vector<int64_t> redone_rounds;            // in order of redoing
  double largest_redo_loss_difference = 0;       // relative, over redone rounds
  // Parameter versions that jumped ahead between two consecutive rounds: a coordinator resumed
  // the job after a restart (a restart while the job was between versions shows no jump).
  int resumes = 0;
  int checkpoints = 0;
  int reassigned_shards = 0;
  std::map<std::string, int> reassigned_by_cause;  // cause (worker ids masked) → shards
  int verified_shards = 0;
  int disagreements = 0;
  int quarantines = 0;
  int plan_changes = 0;
  // With a reference: the largest relative loss difference over the rounds, and where.
  double largest_reference_loss_difference = 0;
  int64_t largest_reference_loss_difference_round = 0;
  // With a reference: the relative loss difference of every round both completed (first
  // completions), to see how two runs drift apart.
  std::map<int64_t, double> reference_loss_differences;
  std::vector<std::string> problems;  // empty: the audit passed
};

// Audits `job` (its final state) against its events (every event, as WatchJob with from_start
// gives them, in sequence order). See the file comment for the problems it finds.
JobAudit AuditJob(const v1::Job& job, const std::vector<v1::JobEvent>& events,
                  const JobAuditOptions& options);

// Compares `audit` round by round with `reference` (an audit of an undisturbed run of the same
// spec) and appends problems to audit->problems.
void CompareWithReference(const JobAudit& reference, const JobAuditOptions& options, JobAudit* audit);

// A ShardReassigned reason without what varies from shard to shard (worker ids, addresses), so
// that reasons with one cause group together: "worker w-… stopped heartbeating; its call was
// cancelled".
std::string ReassignmentCause(const std::string& reason);

}  // namespace slimfit::bench

#endif  // SLIMFIT_BENCH_JOB_AUDIT_H_
