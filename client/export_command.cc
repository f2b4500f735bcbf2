#include "client/export_command.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/sha256.h"
#include "client/coordinator_client.h"
#include "nlohmann/json.hpp"
#include "planner/plan_search.h"

namespace slimfit::client {
namespace {

// A local file that cannot be written is "could not be done" (exit 1), whatever the errno — not a
// usage error, and not the PERMISSION_DENIED that means a token of the wrong kind.
absl::Status LocalFileError(const absl::Status& status) {
  return absl::FailedPreconditionError(status.message());
}

absl::Status DataLoss(const std::string& job_id, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("ExportModel of ", job_id, ": ", what, "; nothing was written"));
}

}  // namespace

absl::Status RunExportCommand(absl::Span<const std::string> args, std::ostream& out) {
  std::string job_id;
  std::string path;
  int64_t round = 0;
  CoordinatorOptions connection;
  base::FlagSet flags(
      "export", "slimfit export JOB --out=FILE.safetensors [--round=N] [--json] [coordinator flags]",
      "Downloads a job's checkpoint as a safetensors file: the latest one (the final one for\n"
      "a finished job), or that of --round. The file appears only once its size and SHA-256\n"
      "match what the coordinator sent; an existing FILE is replaced.");
  flags.Positional("JOB", &job_id, "job id", base::FlagSet::kRequired);
  flags.String("out", &path, "where to write the safetensors file", base::FlagSet::kRequired);
  flags.Int("round", &round, "export the checkpoint of this round (default: the latest)",
            base::FlagSet::kOptionalNoDefault);
  AddCoordinatorFlags(flags, &connection);
  bool help = false;
  if (absl::Status s = ParseServiceFlags(flags, args, out, &connection, &help); !s.ok() || help) return s;
  if (path.empty()) return absl::InvalidArgumentError("--out needs a file name");
  if (flags.IsSet("round") && round < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--round=", round, ": expected 0 or more"));
  }
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(connection);
  if (!client.ok()) return client.status();

  // A fresh temporary file beside FILE (base::AtomicFileWriter: unique per process and call,
  // O_EXCL), so concurrent exports to one path cannot write into each other's file; it becomes FILE
  // only once everything checked out (fsync, rename, directory fsync) and is removed otherwise.
  absl::StatusOr<base::AtomicFileWriter> file = base::AtomicFileWriter::Create(path, 0644);
  if (!file.ok()) return LocalFileError(file.status());

  v1::ExportModelRequest request;
  request.set_job_id(job_id);
  if (flags.IsSet("round")) request.set_round(round);
  std::unique_ptr<grpc::ClientContext> context = (*client)->StreamContext();
  std::unique_ptr<grpc::ClientReaderInterface<v1::ExportModelResponse>> reader =
      (*client)->stub().ExportModel(context.get(), request);
  std::optional<v1::ExportHeader> header;
  std::optional<v1::ExportTrailer> trailer;
  base::Sha256Hasher hasher;
  int64_t received = 0;
  absl::Status local;  // the first problem on our side of the stream; the call is then cancelled
  v1::ExportModelResponse message;
  while (local.ok() && reader->Read(&message)) {
    if (trailer.has_value()) {
      local = DataLoss(job_id, "a message after the trailer");
    } else if (message.has_header()) {
      if (header.has_value()) {
        local = DataLoss(job_id, "a second header");
      } else {
        header = message.header();
      }
    } else if (!header.has_value()) {
      local = DataLoss(job_id, "the stream did not start with a header");
    } else if (message.has_chunk()) {
      const std::string& chunk = message.chunk();
      if (chunk.empty() || chunk.size() > v1::LIMIT_MAX_CHUNK_BYTES) {
        local = DataLoss(job_id, absl::StrCat("a chunk of ", chunk.size(), " bytes (1 to ",
                                              static_cast<int>(v1::LIMIT_MAX_CHUNK_BYTES), " allowed)"));
      } else if (received + static_cast<int64_t>(chunk.size()) > header->total_bytes()) {
        local = DataLoss(
            job_id, absl::StrCat("more than the ", header->total_bytes(), " bytes the header announced"));
      } else {
        hasher.Update(chunk);
        received += static_cast<int64_t>(chunk.size());
        if (absl::Status appended = file->Append(chunk); !appended.ok()) local = LocalFileError(appended);
      }
    } else if (message.has_trailer()) {
      trailer = message.trailer();
    } else {
      local = DataLoss(job_id, "an empty message");
    }
  }
  if (!local.ok()) context->TryCancel();
  const grpc::Status status = reader->Finish();
  if (!local.ok()) return local;
  if (!status.ok()) return (*client)->Convert(status, "ExportModel", context.get());
  if (!header.has_value()) return DataLoss(job_id, "the stream ended without a header");
  if (!trailer.has_value()) {
    return DataLoss(job_id, absl::StrCat("the stream ended without a trailer after ", received, " of ",
                                         header->total_bytes(), " bytes"));
  }
  const std::string sha256 = hasher.FinishHex();
  if (received != header->total_bytes() || trailer->total_bytes() != received) {
    return DataLoss(job_id, absl::StrCat("received ", received, " bytes; the header announced ",
                                         header->total_bytes(), " and the trailer ", trailer->total_bytes()));
  }
  if (trailer->sha256() != sha256) {
    return DataLoss(job_id, absl::StrCat("the ", received, " bytes received have SHA-256 ", sha256,
                                         "; the trailer says ", trailer->sha256()));
  }
  if (absl::Status committed = file->Commit(); !committed.ok()) return LocalFileError(committed);

  if (connection.json) {
    nlohmann::ordered_json json;
    json["path"] = path;
    json["job_id"] = header->job_id().empty() ? job_id : header->job_id();
    json["round"] = header->round();
    json["parameter_version"] = header->parameter_version();
    json["bytes"] = received;
    json["sha256"] = sha256;
    out << json.dump(2) << "\n";
  } else {
    out << "wrote " << path << ": " << (header->job_id().empty() ? job_id : header->job_id()) << " round "
        << header->round() << " (parameter version " << header->parameter_version() << "), " << received
        << " bytes (" << planner::HumanBytes(static_cast<double>(received)) << "), sha256 " << sha256 << "\n";
  }
  return absl::OkStatus();
}

}  // namespace slimfit::client
