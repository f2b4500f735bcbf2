#include "client/watch_command.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/service_format.h"
#include "planner/plan_search.h"

namespace slimfit::client {
namespace {

constexpr absl::Duration kFirstReconnectPause = absl::Milliseconds(100);
constexpr absl::Duration kLongestReconnectPause = absl::Seconds(5);
// Erases the terminal line the cursor is on (carriage return, then ANSI "erase in line").
constexpr absl::string_view kEraseLine = "\r\x1b[K";

std::string DescribePlan(const v1::PlanCandidate& candidate) {
  std::string text = PlanSummaryOf(candidate.plan());
  const int64_t peak = candidate.prediction().peak_bytes() > 0 ? candidate.prediction().peak_bytes()
                                                               : candidate.plan().predicted_peak_bytes();
  if (peak > 0) absl::StrAppend(&text, ", peak ", planner::HumanBytes(static_cast<double>(peak)));
  return text;
}

std::string RoundLine(const v1::RoundCompleted& round) {
  std::vector<std::string> parts = {
      absl::StrCat("round ", round.round(), "/", round.rounds(), round.rerun() ? " (run again)" : ""),
      absl::StrCat("loss ", FormatLoss(round.loss()))};
  if (round.has_bits_per_byte()) parts.push_back(FormatBitsPerByte(round.bits_per_byte()));
  parts.push_back(FormatRate(round.tokens_per_second()));
  if (round.has_eta_seconds()) parts.push_back(absl::StrCat("ETA ", FormatDuration(round.eta_seconds())));
  if (round.reassigned_shards() > 0)
    parts.push_back(absl::StrCat(round.reassigned_shards(), " shards reassigned"));
  if (round.verified_shards() > 0) parts.push_back(absl::StrCat(round.verified_shards(), " verified"));
  if (round.recomputations() > 0)
    parts.push_back(absl::StrCat("computed ", round.recomputations() + 1, " times"));
  if (round.inner_steps() > 0) parts.push_back(absl::StrCat(round.inner_steps(), " inner steps"));
  if (round.late_workers_size() > 0) {
    parts.push_back(absl::StrCat("late, dropped: ", absl::StrJoin(round.late_workers(), ", ")));
  }
  return absl::StrJoin(parts, "  ");
}

std::string ResumedLine(const v1::JobResumed& resumed) {
  std::string line = "resumed";
  if (resumed.reason() == v1::JobResumed::REASON_COORDINATOR_RESTART) {
    absl::StrAppend(&line, " after a coordinator restart");
  } else if (resumed.reason() == v1::JobResumed::REASON_ROLLBACK) {
    absl::StrAppend(&line, " after a rollback");
  }
  if (resumed.initial_parameters()) {
    absl::StrAppend(&line, " from the initial model: no checkpoint matches what was written");
  } else if (resumed.round() == 0) {
    absl::StrAppend(&line, " from the initial model (round 0's checkpoint)");
  } else {
    absl::StrAppend(&line, " from round ", resumed.round(), "'s checkpoint");
  }
  if (resumed.rounds_completed() == resumed.round() + 1) {
    absl::StrAppend(&line, "; round ", resumed.rounds_completed(), " runs again");
  } else if (resumed.rounds_completed() > resumed.round() + 1) {
    absl::StrAppend(&line, "; rounds ", resumed.round() + 1, " to ", resumed.rounds_completed(),
                    " run again");
  }
  if (resumed.unverifiable_checkpoints_size() > 0) {
    absl::StrAppend(
        &line, "; passed over (changed on disk): ", absl::StrJoin(resumed.unverifiable_checkpoints(), "; "));
  }
  return line;
}

std::string EventLine(const v1::JobEvent& event) {
  switch (event.event_case()) {
    case v1::JobEvent::kResumed:
      return ResumedLine(event.resumed());
    case v1::JobEvent::kStateChanged: {
      const v1::JobStateChanged& change = event.state_changed();
      std::string line =
          absl::StrCat("state ", JobStateName(change.previous()), " -> ", JobStateName(change.state()));
      if (!change.reason().empty()) absl::StrAppend(&line, ": ", change.reason());
      return line;
    }
    case v1::JobEvent::kEvaluation: {
      const v1::Evaluation& evaluation = event.evaluation();
      std::string line = evaluation.round() == 0
                             ? std::string("evaluation before round 1")
                             : absl::StrCat("evaluation after round ", evaluation.round());
      absl::StrAppend(&line, ": loss ", FormatLoss(evaluation.loss()));
      if (evaluation.has_bits_per_byte())
        absl::StrAppend(&line, ", ", FormatBitsPerByte(evaluation.bits_per_byte()));
      absl::StrAppend(&line, " (", FormatCount(evaluation.tokens()), " held-out tokens)");
      return line;
    }
    case v1::JobEvent::kCheckpointWritten: {
      const v1::CheckpointWritten& checkpoint = event.checkpoint_written();
      return absl::StrCat("checkpoint of round ", checkpoint.round(), " written (",
                          planner::HumanBytes(static_cast<double>(checkpoint.bytes())), ", sha256 ",
                          checkpoint.sha256().substr(0, 12), "...)");
    }
    case v1::JobEvent::kWorkerPlanChanged: {
      const v1::WorkerPlanChanged& change = event.worker_plan_changed();
      std::string line = absl::StrCat("worker ", change.worker_id(), " plan from round ", change.round(),
                                      ": ", DescribePlan(change.plan()), ", ",
                                      FormatRate(change.predicted_tokens_per_second()), " predicted");
      if (!change.reason().empty()) absl::StrAppend(&line, " (", change.reason(), ")");
      return line;
    }
    case v1::JobEvent::kShardReassigned: {
      const v1::ShardReassigned& shard = event.shard_reassigned();
      std::string line =
          absl::StrCat("round ", shard.round(), " shard ", shard.shard_id(), " reassigned from worker ",
                       shard.from_worker_id(), " (next attempt ", shard.next_attempt(), ")");
      if (!shard.reason().empty()) absl::StrAppend(&line, ": ", shard.reason());
      return line;
    }
    case v1::JobEvent::kWorkerQuarantined: {
      const v1::WorkerQuarantined& quarantined = event.worker_quarantined();
      std::string line = absl::StrCat("worker ", quarantined.worker_id(), " quarantined in round ",
                                      quarantined.round(), ": ", quarantined.reason());
      if (quarantined.recomputed_shards() > 0) {
        absl::StrAppend(&line, " (the round is computed again without its ", quarantined.recomputed_shards(),
                        " shard", quarantined.recomputed_shards() == 1 ? "" : "s", ")");
      }
      if (quarantined.has_recompute_from_round()) {
        absl::StrAppend(&line, "; its results since round ", quarantined.recompute_from_round(),
                        " are undone: training goes back to ",
                        quarantined.rolled_back_to_round() == 0
                            ? std::string("the initial model")
                            : absl::StrCat("round ", quarantined.rolled_back_to_round(), "'s checkpoint"));
      }
      return line;
    }
    case v1::JobEvent::kShardVerified: {
      const v1::ShardVerified& verified = event.shard_verified();
      const std::string workers = absl::StrJoin(verified.worker_ids(), ", ");
      if (verified.agreed()) {
        return absl::StrFormat("round %d shard %d verified: %s agree (relative difference %.2g)",
                               verified.round(), verified.shard_id(), workers,
                               verified.relative_difference());
      }
      return absl::StrFormat("round %d shard %d: %s disagreed; %s outvoted (the other two agree to %.2g)",
                             verified.round(), verified.shard_id(), workers, verified.odd_worker_id(),
                             verified.relative_difference());
    }
    case v1::JobEvent::kRoundCompleted:
      return RoundLine(event.round_completed());
    case v1::JobEvent::kSnapshot:
      return JobSummary(event.snapshot());
    case v1::JobEvent::EVENT_NOT_SET:
      break;
  }
  return absl::StrCat("event ", event.sequence(), " of a kind this client does not know");
}

// Writes events as text or JSON lines, keeping the progress line at the bottom on a terminal.
class Renderer {
 public:
  Renderer(const WatchOptions& options, std::ostream& out) : options_(options), out_(out) {}

  void Event(const v1::JobEvent& event, bool reconnected) {
    if (options_.json) {
      out_ << ProtoToJson(event, /*pretty=*/false) << "\n" << std::flush;
      return;
    }
    if (event.has_snapshot()) {
      Line(absl::StrCat(reconnected ? "reconnected: " : "watching ", JobSummary(event.snapshot())));
    } else if (event.has_round_completed()) {
      Progress(RoundLine(event.round_completed()));
    } else if (event.has_shard_verified() && event.shard_verified().agreed()) {
      // Routine: counted in the round's line ("N verified").
    } else {
      Line(EventLine(event));
    }
  }

  // A line of text mode that is not an event (reconnecting). Nothing in JSON mode.
  void Note(const std::string& text) {
    if (!options_.json) Line(text);
  }

  // Ends a progress line left open on a terminal.
  void Finish() {
    if (!progress_.empty()) out_ << "\n" << std::flush;
    progress_.clear();
  }

 private:
  void Line(const std::string& text) {
    if (options_.terminal && !progress_.empty()) {
      out_ << kEraseLine << text << "\n" << progress_ << std::flush;
    } else {
      out_ << text << "\n" << std::flush;
    }
  }

  void Progress(const std::string& text) {
    if (!options_.terminal) {
      out_ << text << "\n" << std::flush;
      return;
    }
    progress_ = text;
    out_ << kEraseLine << text << std::flush;
  }

  const WatchOptions& options_;
  std::ostream& out_;
  std::string progress_;  // the progress line now on the terminal's last line ("" if none)
};

absl::Status Outcome(const std::string& job_id, v1::JobState state, const std::string& reason) {
  const std::string what = absl::StrCat(job_id, " ", JobStateName(state), reason.empty() ? "" : ": ", reason);
  switch (state) {
    case v1::JOB_STATE_SUCCEEDED:
      return absl::OkStatus();
    case v1::JOB_STATE_CANCELLED:
      return absl::CancelledError(what);
    default:
      return absl::AbortedError(what);
  }
}

}  // namespace

void AddReconnectFlag(base::FlagSet& flags, double* seconds) {
  flags.Double("reconnect_seconds", seconds,
               "how long to keep reconnecting when the coordinator goes away while watching");
}

absl::StatusOr<absl::Duration> ReconnectDuration(double seconds) {
  if (!(seconds >= 0 && seconds <= 86400)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reconnect_seconds=", seconds, ": expected 0 to 86400 seconds"));
  }
  return absl::Seconds(seconds);
}

absl::Status WatchJob(const CoordinatorClient& client, const std::string& job_id, const WatchOptions& options,
                      std::ostream& out) {
  Renderer renderer(options, out);
  absl::BitGen random;
  int64_t last_sequence = 0;
  bool received_any = false;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  std::string reason;
  std::optional<absl::Time> broken_since;
  absl::Duration pause = kFirstReconnectPause;

  for (;;) {
    std::unique_ptr<grpc::ClientContext> context = client.StreamContext();
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_after_sequence(last_sequence);
    if (options.from_start && !received_any) request.set_from_start(true);
    std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
        client.stub().WatchJob(context.get(), request);
    const bool reconnected = received_any;
    v1::JobEvent event;
    while (reader->Read(&event)) {
      broken_since.reset();
      if (event.has_snapshot()) {
        // The first stream's snapshot includes everything up to its sequence; on a reconnect the
        // events after `last_sequence` are replayed after the snapshot, so it moves nothing.
        // With from_start the events before the snapshot follow it.
        if (!received_any && !options.from_start) last_sequence = event.sequence();
        state = event.snapshot().state();
        reason = event.snapshot().state_reason();
      } else {
        if (event.sequence() <= last_sequence) continue;  // seen before the reconnect
        last_sequence = event.sequence();
        pause = kFirstReconnectPause;
        if (event.has_state_changed()) {
          state = event.state_changed().state();
          reason = event.state_changed().reason();
        }
      }
      received_any = true;
      renderer.Event(event, reconnected);
    }
    const grpc::Status status = reader->Finish();
    if (status.ok() && IsTerminal(state)) {
      renderer.Finish();
      return Outcome(job_id, state, reason);
    }
    if (status.ok() && !received_any) {
      return absl::InternalError(
          absl::StrCat("WatchJob: the coordinator ended the stream without a snapshot of ", job_id));
    }
    // Only a stream that worked before is reopened: a first call that fails says why at once.
    const bool transient = status.ok() || status.error_code() == grpc::StatusCode::UNAVAILABLE;
    if (!received_any || !transient) {
      renderer.Finish();
      return client.Convert(status, "WatchJob", context.get());
    }
    const absl::Time now = absl::Now();
    if (!broken_since.has_value()) {
      broken_since = now;
      renderer.Note(absl::StrCat("lost the coordinator at ", client.address(), " (",
                                 status.ok() ? "stream ended early" : status.error_message(),
                                 "); reconnecting for up to ",
                                 FormatDuration(absl::ToDoubleSeconds(options.reconnect))));
    }
    if (now - *broken_since >= options.reconnect) {
      renderer.Finish();
      return absl::UnavailableError(absl::StrCat(
          "lost the coordinator at ", client.address(), " while watching ", job_id,
          " and could not reconnect for ", FormatDuration(absl::ToDoubleSeconds(options.reconnect)),
          " (last event ", last_sequence,
          "; last error: ", status.ok() ? "stream ended early" : status.error_message(), ")"));
    }
    // Jittered exponential back-off, never past the reconnect deadline.
    const absl::Duration jittered = pause * absl::Uniform(random, 0.8, 1.2);
    absl::SleepFor(std::min(jittered, *broken_since + options.reconnect - now));
    pause = std::min(pause * 2, kLongestReconnectPause);
  }
}

absl::Status RunWatchCommand(absl::Span<const std::string> args, std::ostream& out, bool terminal) {
  std::string job_id;
  double reconnect_seconds = 60;
  CoordinatorOptions connection;
  base::FlagSet flags("watch",
                      "slimfit watch JOB [--from_start] [--reconnect_seconds=S] [--json] [coordinator flags]",
                      "Follows a job until it ends: progress of every round (loss, bits per byte, tokens/s,\n"
                      "ETA), evaluations, checkpoints, plan changes, reassigned shards and state changes.\n"
                      "Exit status 0 when the job SUCCEEDED, 1 when it FAILED or was CANCELLED. --json\n"
                      "prints every event as one JSON object per line.");
  flags.Positional("JOB", &job_id, "job id (from 'slimfit submit' or 'slimfit jobs')",
                   base::FlagSet::kRequired);
  bool from_start = false;
  flags.Bool(
      "from_start", &from_start,
      "replay the job's events from its first (a job watched after it started or ended), then follow it");
  AddReconnectFlag(flags, &reconnect_seconds);
  AddCoordinatorFlags(flags, &connection);
  bool help = false;
  if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;
  absl::StatusOr<absl::Duration> reconnect = ReconnectDuration(reconnect_seconds);
  if (!reconnect.ok()) return reconnect.status();
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
  if (!client.ok()) return client.status();
  WatchOptions options;
  options.from_start = from_start;
  options.json = connection.json;
  options.terminal = terminal && !connection.json;
  options.reconnect = *reconnect;
  return WatchJob(**client, job_id, options, out);
}

}  // namespace slimfit::client
