#include "client/status_command.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/files.h"
#include "base/flags.h"
#include "client/coordinator_client.h"
#include "client/job_history.h"
#include "client/service_format.h"
#include "status_views/loss_curves.h"
#include "wire/tensor_codec.h"

namespace slimfit::client {

std::string FormatJobStatus(const v1::Job& job) {
  std::string text;
  auto line = [&text](absl::string_view label, const std::string& value) {
    absl::StrAppendFormat(&text, "%-12s %s\n", label, value);
  };
  const v1::JobProgress& progress = job.progress();
  const int64_t rounds = progress.rounds() > 0 ? progress.rounds() : job.spec().rounds();
  std::string name = job.job_id();
  if (!job.spec().name().empty() && job.spec().name() != job.job_id()) {
    absl::StrAppend(&name, " \"", job.spec().name(), "\"");
  }
  line("job", name);
  std::string state = JobStateName(job.state());
  if (!job.state_reason().empty()) absl::StrAppend(&state, " (", job.state_reason(), ")");
  line("state", state);
  line("rounds", absl::StrCat(progress.rounds_completed(), "/", rounds));
  std::string loss = progress.has_loss() ? FormatLoss(progress.loss()) : "-";
  if (progress.has_bits_per_byte())
    absl::StrAppend(&loss, " (", FormatBitsPerByte(progress.bits_per_byte()), ")");
  line("loss", loss);
  std::string evaluation = progress.has_eval_loss() ? FormatLoss(progress.eval_loss()) : "-";
  if (progress.has_eval_bits_per_byte()) {
    absl::StrAppend(&evaluation, " (", FormatBitsPerByte(progress.eval_bits_per_byte()), ")");
  }
  if (progress.has_eval_loss() && progress.has_eval_round()) {
    absl::StrAppend(&evaluation, progress.eval_round() == 0
                                     ? " before round 1"
                                     : absl::StrCat(" after round ", progress.eval_round()));
  }
  line("evaluation", evaluation);
  std::string speed = progress.has_tokens_per_second() ? FormatRate(progress.tokens_per_second()) : "-";
  if (job.state() == v1::JOB_STATE_RUNNING) {
    absl::StrAppend(&speed, ", ", progress.active_workers(),
                    progress.active_workers() == 1 ? " active worker" : " active workers");
  }
  line("speed", speed);
  line("ETA", progress.has_eta_seconds() && !IsTerminal(job.state()) ? FormatDuration(progress.eta_seconds())
                                                                     : std::string("-"));
  line("checkpoint", progress.has_checkpoint_round() ? absl::StrCat("round ", progress.checkpoint_round())
                                                     : std::string("-"));
  line("tokens",
       absl::StrCat(FormatCount(progress.tokens_trained()), " trained; ", FormatCount(job.training_tokens()),
                    " for training, ", FormatCount(job.held_out_tokens()), " held out"));
  const int64_t wire = progress.bytes_to_workers() + progress.bytes_from_workers();
  if (wire > 0) {
    std::string bytes =
        absl::StrFormat("%.1f MB (%.1f MB to workers, %.1f MB back)", static_cast<double>(wire) / 1e6,
                        static_cast<double>(progress.bytes_to_workers()) / 1e6,
                        static_cast<double>(progress.bytes_from_workers()) / 1e6);
    if (progress.tokens_trained() > 0) {
      absl::StrAppendFormat(&bytes, "; %.1f bytes per trained token",
                            static_cast<double>(wire) / static_cast<double>(progress.tokens_trained()));
    }
    const v1::UpdateCompression& compression = job.spec().compression();
    if (performer::IsCompressed(compression.pseudo_gradients())) {
      absl::StrAppend(&bytes, "; pseudo-gradients ",
                      performer::CompressionName(compression.pseudo_gradients()));
    }
    if (performer::IsCompressed(compression.parameters())) {
      absl::StrAppend(&bytes, "; parameters as ", performer::CompressionName(compression.parameters()),
                      " differences");
    }
    line("on the wire", bytes);
  }
  line("created", FormatTimestamp(job.created_at()));
  line("started", FormatTimestamp(job.started_at()));
  line("finished", FormatTimestamp(job.finished_at()));
  return text;
}

absl::Status RunStatusCommand(absl::Span<const std::string> args, std::ostream& out) {
  std::string job_id;
  std::string svg;
  CoordinatorOptions connection;
  base::FlagSet flags("status", "slimfit status JOB [--svg=FILE] [--json] [coordinator flags]",
                      "One job: state and reason, rounds, loss and bits per byte, the latest evaluation,\n"
                      "tokens per second, ETA and the latest checkpoint. --json prints the Job.");
  flags.Positional("JOB", &job_id, "job id", base::FlagSet::kRequired);
  flags.String("svg", &svg, "also draw the training and held-out loss curves so far as an SVG chart");
  AddCoordinatorFlags(flags, &connection);
  bool help = false;
  if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
  if (!client.ok()) return client.status();
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  absl::Status status = (*client)->Call(
      "GetJob", Idempotency::kIdempotent,
      [&](grpc::ClientContext* context) { return (*client)->stub().GetJob(context, request, &job); });
  if (!status.ok()) return status;
  if (!svg.empty()) {
    absl::StatusOr<std::vector<v1::JobEvent>> history = ReadJobHistory(**client, job_id);
    if (!history.ok()) return history.status();
    const std::string title = absl::StrCat(
        job.job_id(), job.spec().name().empty() ? "" : " \"" + job.spec().name() + "\"", ": loss by round");
    absl::StatusOr<std::string> chart = status_views::LossCurvesSvg(*history, title);
    if (!chart.ok())
      return absl::Status(chart.status().code(), absl::StrCat("--svg: ", chart.status().message()));
    if (absl::Status written = base::WriteFileAtomically(svg, *chart); !written.ok()) {
      return absl::Status(written.code(), absl::StrCat("--svg: ", written.message()));
    }
  }
  if (connection.json) {
    out << ProtoToJson(job, /*pretty=*/true) << "\n";
  } else {
    out << FormatJobStatus(job);
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
